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
//! rounds the removal holds the ingest task back (the stream's ingest gate, which the task
//! holds while it stores a batch) for one last unlocked round, which is then fresh: only that
//! task records entries. Readers never take the gate, so they go on throughout; no snapshot is
//! written in place, under the store's lock.
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
//! rollup, a one-shot schedule's copy) or its appends may evict; if a plain message of the
//! same ingest batch recorded an entry first, the ingest batch is split before the atomic
//! batch for it (`Stream::commit_needs_snapshot`). If an unlocked
//! snapshot of the batch failed, a message that still needs one is refused with the failure
//! (`Ingest::snapshot_missing`): no retry with its fsyncs under the lock. The periodic snapshot (every `PRODUCER_SNAPSHOT_INTERVAL`, without the
//! lock) and the one before a batch keep splits rare.

use super::{StoreGuard, Stream};
use crate::jetstream::producers::Producers;
use crate::limits::PRODUCER_SNAPSHOT_ROUNDS_MAX;
use crate::sync::lock;
use semaq_wire::clock;

/// What a snapshot whose rounds all found new entries does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Starved {
    /// Nothing waits on it (the periodic snapshot, the one before a batch): the next tick tries.
    GiveUp,
    /// A removal outside ingest waits: the ingest task is held back for one last round.
    HoldIngest,
    /// The ingest task's own removal: it records every entry, so a round never starves; one
    /// that did is refused rather than written in place.
    Refuse,
}

/// Whether storing `message` may purge other messages: a KV rollup, or a one-shot schedule's
/// copy (which removes its schedule).
pub(super) fn may_purge(message: &super::Inbound) -> bool {
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
    /// Not from the ingest task while it stores a batch (it holds the ingest gate): see
    /// [`Stream::before_held_removal`].
    pub(super) fn before_removal<'s>(
        &'s self,
        store: StoreGuard<'s>,
        seq: u64,
    ) -> (std::io::Result<()>, StoreGuard<'s>) {
        self.snapshot_if(store, |producers, _| producers.removal_needs_snapshot(seq), Starved::HoldIngest)
    }

    /// [`Stream::before_removal`] for the removals an ingest batch held (`split.rs`), made by
    /// the ingest task itself between two parts of the batch.
    pub(super) fn before_held_removal<'s>(&'s self, store: StoreGuard<'s>) -> (std::io::Result<()>, StoreGuard<'s>) {
        self.snapshot_if(store, |producers, _| producers.removal_needs_snapshot(u64::MAX), Starved::Refuse)
    }

    /// L3: before expiring messages older than `max_age_ns` at `now_ns` (see [`Stream::before_removal`]).
    pub(super) fn before_expiry<'s>(
        &'s self,
        store: StoreGuard<'s>,
        max_age_ns: i64,
        now_ns: i64,
    ) -> (std::io::Result<()>, StoreGuard<'s>) {
        let needed = |producers: &Producers, _| producers.expiry_needs_snapshot(max_age_ns, now_ns);
        self.snapshot_if(store, needed, Starved::HoldIngest)
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
            producers.is_loaded() && producers.batch_needs_snapshot(&limits, (count, bytes), purges)
        };
        let (written, store) = self.snapshot_if(store, needed, Starved::GiveUp);
        drop(store);
        let error = written.err()?;
        // A message of the batch that still needs it is refused (no retry under the lock).
        tracing::warn!(stream = %self.name, %error, "producer snapshot before a batch failed");
        Some(error.to_string())
    }

    /// Takes the ingest gate (lock order: before the store's lock). Its holder may be writing a
    /// producer snapshot: waiting for it, the runtime moves this worker's other tasks off.
    pub(super) fn hold_ingest(&self) -> std::sync::MutexGuard<'_, ()> {
        match self.ingest_gate.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => tokio::task::block_in_place(|| lock(&self.ingest_gate)),
        }
    }

    /// L3: the periodic (and final) producer snapshot, when producers changed since the last;
    /// its fsyncs run with the store's lock let go. Returns the lock, taken again.
    pub(super) fn snapshot_producers<'s>(&'s self, store: StoreGuard<'s>) -> StoreGuard<'s> {
        let due = |producers: &Producers, last_seq| producers.is_loaded() && producers.periodic_due(last_seq);
        let (written, store) = self.snapshot_if(store, due, Starved::GiveUp);
        if let Err(error) = written {
            tracing::error!(stream = %self.name, %error, "cannot write the producer snapshot");
        }
        store
    }

    /// Writes producer snapshots while `needed` (given the table and the stream's last
    /// sequence) holds, each in three steps with the store's lock let go for the fsyncs; after
    /// `PRODUCER_SNAPSHOT_ROUNDS_MAX` rounds that all found new entries, does what `starved` says.
    fn snapshot_if<'s>(
        &'s self,
        store: StoreGuard<'s>,
        needed: impl Fn(&Producers, u64) -> bool,
        starved: Starved,
    ) -> (std::io::Result<()>, StoreGuard<'s>) {
        let (fresh, store) = self.snapshot_rounds(store, &needed, PRODUCER_SNAPSHOT_ROUNDS_MAX);
        match (fresh, starved) {
            (Ok(false), Starved::HoldIngest) => {}
            (Ok(false), Starved::Refuse) => {
                return (Err(std::io::Error::other("the producer table kept changing")), store)
            }
            (Ok(_), _) => return (Ok(()), store),
            (Err(error), _) => return (Err(error), store),
        }
        // Lock order: the ingest gate before the store's lock, so it is let go first.
        drop(store);
        let _ingest_held = self.hold_ingest();
        let (fresh, store) = self.snapshot_rounds(self.store(), &needed, 1);
        // Only the ingest task records entries, and it waits: the last round left none unsaved.
        let changed = "the producer table changed with the ingest held back";
        let written = fresh.and_then(|fresh| if fresh { Ok(()) } else { Err(std::io::Error::other(changed)) });
        (written, store)
    }

    /// Up to `rounds` snapshots in three steps while `needed` holds; returns whether it no
    /// longer does (under the lock, returned with it).
    fn snapshot_rounds<'s>(
        &'s self,
        mut store: StoreGuard<'s>,
        needed: &impl Fn(&Producers, u64) -> bool,
        rounds: usize,
    ) -> (std::io::Result<bool>, StoreGuard<'s>) {
        for _ in 0..rounds {
            let mut producers = lock(&self.producers);
            if !needed(&producers, store.state().last_seq) {
                return (Ok(true), store);
            }
            let job = match producers.take_snapshot(store.as_mut(), clock::unix_nanos_now()) {
                Ok(Some(job)) => job,
                // No file, or an atomic batch being applied (never here: ingest holds the lock).
                Ok(None) => return (Ok(true), store),
                Err(error) => return (Err(error), store),
            };
            drop(producers);
            drop(store);
            // Blocks for the disk: let the runtime move other tasks off this worker meanwhile.
            let (synced, done) = tokio::task::block_in_place(|| {
                crate::jetstream::failpoint::sync_delay();
                job.run()
            });
            let (finished, taken) = tokio::task::block_in_place(|| self.finish_sync(self.store(), synced));
            store = taken;
            let finished = finished.map_err(std::io::Error::other);
            let applied = lock(&self.producers).finish_snapshot(done);
            if let Err(error) = finished.and(applied) {
                return (Err(error), store);
            }
        }
        let producers = lock(&self.producers);
        let fresh = !needed(&producers, store.state().last_seq);
        drop(producers);
        (Ok(fresh), store)
    }
}
