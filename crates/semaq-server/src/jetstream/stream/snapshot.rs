//! L3 producer snapshots taken outside ingest (before a purge, a `MSG.DELETE`, a retention or
//! expiry removal, a config change; the periodic and final ones) run their fsyncs and the
//! file's write with the store's lock let go, in three steps as commits do: the table's
//! content and a sync ticket are taken under the lock (`Producers::take_snapshot`), the ticket
//! and the write run without it (`SnapshotJob::run`), and the outcome is recorded under it
//! again. So stream info, gets and consumers are answered meanwhile.
//!
//! What the snapshot exists for holds: a removal never becomes durable while the durable
//! snapshot lacks a producer entry it could lose. The removal is made only after the snapshot
//! is durable and the need has been checked again under the lock (entries recorded while it
//! was written make it needed again); a removal made before the snapshot was durable could
//! reach the disk with any other commit taken meanwhile (the ingest task's, for one). Under
//! steady L3 ingest every round can find new entries: after `PRODUCER_SNAPSHOT_ROUNDS_MAX`
//! rounds the snapshot is written in place, under the lock, as before.
//!
//! Before an ingest batch whose appends limits could answer with a removal past the snapshot
//! (`max_msgs`, `max_bytes`, per subject, discard old), the ingest task writes it the same way
//! before taking the lock for the batch ([`Stream::snapshot_before_batch`]): only that task
//! appends, so no entry is recorded meanwhile and the batch's own check then finds it fresh
//! (unless the batch alone exceeds the limit).
//!
//! Snapshots an ingest batch needs (that last case; an interest stream's unwanted message, a KV
//! rollup's or a schedule's purge, which the batch's own entries make needed) split the batch
//! around them (`split.rs`): the removal is held, the snapshot written this way, then the
//! removal made and the batch continued. An atomic batch's commit, inside whose appends nothing
//! can be held, gets its snapshot before the batch too, when one of its messages may purge (a
//! rollup, a one-shot schedule's copy) or its appends may evict; only if a plain message of
//! the same ingest batch recorded an entry first is one still written in place. If an unlocked
//! snapshot of the batch failed, a message that still needs one is refused with the failure
//! (`Ingest::snapshot_in_place`): no retry with its fsyncs under the lock. The periodic snapshot (every `PRODUCER_SNAPSHOT_INTERVAL`, without the
//! lock) and the one before a batch keep splits rare.

use super::{StoreGuard, Stream};
use crate::jetstream::producers::Producers;
use crate::sync::lock;
use semaq_wire::clock;

/// Rounds of an unlocked snapshot before a removal's snapshot is written under the lock.
const PRODUCER_SNAPSHOT_ROUNDS_MAX: usize = 3;

/// Whether storing `message` may purge other messages: a KV rollup, or a one-shot schedule's
/// copy (which removes its schedule).
fn may_purge(message: &super::Inbound) -> bool {
    let block = message.headers.as_deref().unwrap_or_default();
    let headers = semaq_wire::Headers::new(block);
    let [rollup, scheduler] =
        headers.get_many(&[semaq_wire::headers::names::ROLLUP, crate::jetstream::schedules::SCHEDULER]);
    rollup.is_some() || scheduler.is_some()
}

impl Stream {
    /// L3: before removing stored message `seq` (`u64::MAX`: any), makes the durable producer
    /// snapshot hold every entry the removal could lose, its fsyncs run with the store's lock
    /// let go; returns the outcome and the lock, taken again. Remove only on success, before
    /// letting the lock go.
    pub(super) fn before_removal<'s>(
        &'s self,
        store: StoreGuard<'s>,
        seq: u64,
    ) -> (std::io::Result<()>, StoreGuard<'s>) {
        self.snapshot_if(store, |producers, _| producers.removal_needs_snapshot(seq), true)
    }

    /// L3: before expiring messages older than `max_age_ns` at `now_ns` (see [`Stream::before_removal`]).
    pub(super) fn before_expiry<'s>(
        &'s self,
        store: StoreGuard<'s>,
        max_age_ns: i64,
        now_ns: i64,
    ) -> (std::io::Result<()>, StoreGuard<'s>) {
        self.snapshot_if(store, |producers, _| producers.expiry_needs_snapshot(max_age_ns, now_ns), true)
    }

    /// L3: before storing `batch`, the snapshot its appends could need (limits removing the
    /// oldest messages past the snapshot), written with the store's lock let go. Sizes are the
    /// raw ones: the exact check stays in the batch (`before_append`), this only makes it rare.
    /// An atomic batch `batch` commits counts whole (its staged messages too), and one whose
    /// messages may purge (a rollup, a one-shot schedule's copy) needs the snapshot as any
    /// removal does: inside its appends nothing can be held, so it is written here rather
    /// than in place, under the lock.
    /// Returns why the snapshot failed, if it did: the batch then refuses a message that still
    /// needs one rather than write it in place.
    pub(super) fn snapshot_before_batch(
        &self,
        config: &crate::jetstream::config::StreamConfig,
        batch: &[super::Inbound],
        batches: &crate::jetstream::batch::Batches,
    ) -> Option<String> {
        if !config.exactly_once() || self.dir.is_none() {
            return None;
        }
        let (staged, arriving) = batches.committed_by(batch);
        let purges = staged.iter().chain(&arriving).any(|message| may_purge(message));
        let count = (batch.len() + staged.len()) as u64;
        let bytes: u64 = batch.iter().chain(staged.iter().copied()).map(|m| m.size() as u64).sum();
        let store = self.store();
        let limits = store.limits().clone();
        let needed = |producers: &Producers, _| {
            producers.is_loaded()
                && (producers.appends_need_snapshot(&limits, count, bytes)
                    || (purges && producers.removal_needs_snapshot(u64::MAX)))
        };
        let (written, store) = self.snapshot_if(store, needed, false);
        drop(store);
        let error = written.err()?;
        // A message of the batch that still needs it is refused (no retry under the lock).
        tracing::warn!(stream = %self.name, %error, "producer snapshot before a batch failed");
        Some(error.to_string())
    }

    /// L3: the periodic (and final) producer snapshot, when producers changed since the last;
    /// its fsyncs run with the store's lock let go. Returns the lock, taken again.
    pub(super) fn snapshot_producers<'s>(&'s self, store: StoreGuard<'s>) -> StoreGuard<'s> {
        let due = |producers: &Producers, last_seq| producers.is_loaded() && producers.periodic_due(last_seq);
        let (written, store) = self.snapshot_if(store, due, false);
        if let Err(error) = written {
            tracing::error!(stream = %self.name, %error, "cannot write the producer snapshot");
        }
        store
    }

    /// Writes producer snapshots while `needed` (given the table and the stream's last
    /// sequence) holds, each in three steps; the last round allowed writes in place when
    /// `in_place_last` (a removal waits on it), else gives up until the next tick.
    fn snapshot_if<'s>(
        &'s self,
        mut store: StoreGuard<'s>,
        needed: impl Fn(&Producers, u64) -> bool,
        in_place_last: bool,
    ) -> (std::io::Result<()>, StoreGuard<'s>) {
        for round in 0..=PRODUCER_SNAPSHOT_ROUNDS_MAX {
            let mut producers = lock(&self.producers);
            if !needed(&producers, store.state().last_seq) {
                return (Ok(()), store);
            }
            let now = clock::unix_nanos_now();
            if round >= PRODUCER_SNAPSHOT_ROUNDS_MAX {
                if !in_place_last {
                    return (Ok(()), store);
                }
                let written = producers.write_snapshot(store.as_mut(), now);
                drop(producers);
                return (written, store);
            }
            let job = match producers.take_snapshot(store.as_mut(), now) {
                Ok(Some(job)) => job,
                // No file, or an atomic batch being applied (never here: ingest holds the lock).
                Ok(None) => return (Ok(()), store),
                Err(error) => return (Err(error), store),
            };
            drop(producers);
            drop(store);
            // Blocks for the disk: let the runtime move other tasks off this worker meanwhile.
            let (synced, done) = tokio::task::block_in_place(|| {
                crate::jetstream::failpoint::sync_delay();
                job.run()
            });
            store = self.store();
            let finished = store.sync_finish(synced).map_err(std::io::Error::other);
            let applied = lock(&self.producers).finish_snapshot(done);
            if let Err(error) = finished.and(applied) {
                return (Err(error), store);
            }
        }
        (Ok(()), store)
    }
}
