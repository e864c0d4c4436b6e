//! Retention by acknowledgement: a work queue drops what a consumer acknowledged, an interest
//! stream what every interested consumer acknowledged.
//!
//! Nobody waits on such a removal, so it is not fsynced on the ack's path (that cost one fsync
//! per ack, under the stream's lock, and held the acking client's connection through it):
//! the store takes it at once (readers see it gone) and the ingest task makes it durable on
//! its next limits tick, or sooner with the next publish's commit, which covers every change
//! made before it. A crash in between can leave a message the consumers had acknowledged, so
//! at start [`Stream::recheck_retention`] removes those again, as nats-server's
//! `checkInterestState` does.

use std::sync::atomic::Ordering;

use super::Stream;
use crate::jetstream::config::Retention;
use crate::limits;
use crate::options::SyncPolicy;

impl Stream {
    /// Applies retention after acks of `seqs`: a work queue drops them, an interest stream
    /// each one every interested consumer acknowledged.
    pub fn acknowledged(&self, seqs: &[u64]) {
        let retention = self.config().retention;
        if retention == Retention::Limits || seqs.is_empty() {
            return;
        }
        let consumers = self.consumers();
        let removed = self.remove_where(seqs, |seq, subject| {
            retention == Retention::Workqueue || consumers.iter().all(|consumer| consumer.has_acked(seq, subject))
        });
        if removed {
            self.notify_changed();
        }
    }

    /// At start, after the consumers are restored: removes what they had acknowledged but the
    /// store still holds (a removal a crash took before it was synced), then syncs. Looks at most
    /// `RETENTION_RECHECK_MESSAGES_MAX` sequences from the stream's first.
    pub fn recheck_retention(&self) {
        let retention = self.config().retention;
        let consumers = self.consumers();
        if retention == Retention::Limits || consumers.is_empty() {
            return;
        }
        let first_seq = self.store().state().first_seq;
        let delivered_end = consumers.iter().map(|consumer| consumer.next_delivery_seq()).max().unwrap_or(0);
        let end = delivered_end.min(first_seq.saturating_add(limits::RETENTION_RECHECK_MESSAGES_MAX));
        let seqs: Vec<u64> = (first_seq..end).collect();
        let removed = self.remove_where(&seqs, |seq, subject| match retention {
            // Acknowledged by the consumer whose filter takes it (a work queue's filters do not
            // overlap); `has_acked` is true for a subject outside a consumer's filter.
            Retention::Workqueue => {
                consumers.iter().any(|consumer| consumer.filter_matches(subject) && consumer.has_acked(seq, subject))
            }
            _ => consumers.iter().all(|consumer| consumer.has_acked(seq, subject)),
        });
        if removed {
            tracing::info!(stream = %self.name, "removed acknowledged messages a crash had left");
            // Nothing else runs on the stream yet: a plain sync, under its lock.
            self.removals_unsynced.store(false, Ordering::Release);
            if let Err(error) = self.store().sync() {
                tracing::error!(stream = %self.name, %error, "cannot sync the removal of acknowledged messages");
            }
            self.notify_changed();
        }
    }

    /// Removes each of `seqs` still stored for which `done(seq, subject)` holds; durable later
    /// (see the module). Returns whether anything was removed.
    fn remove_where(&self, seqs: &[u64], done: impl Fn(u64, &str) -> bool) -> bool {
        let mut removed = false;
        for &seq in seqs {
            let subject = match self.store().get(seq) {
                Ok(Some(message)) => message.subject,
                _ => continue,
            };
            if !done(seq, &subject) {
                continue;
            }
            let (snapshot, mut store) = self.before_removal(self.store(), seq);
            if let Err(error) = snapshot {
                tracing::error!(stream = %self.name, %error, "keeping an acknowledged message: producer snapshot failed");
                continue;
            }
            match store.remove(seq) {
                Ok(true) => removed = true,
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(stream = %self.name, seq, %error, "cannot remove an acknowledged message")
                }
            }
        }
        if removed {
            self.removals_made();
        }
        removed
    }

    /// Notes removals the store made without an fsync (retention's, expiry's): the ingest task
    /// commits them on its next limits tick (see `commit_removals`).
    pub(super) fn removals_made(&self) {
        if self.dir.is_some() {
            self.removals_unsynced.store(true, Ordering::Release);
        }
    }

    /// Whether retention removed messages not yet made durable.
    pub(super) fn removals_pending(&self) -> bool {
        self.removals_unsynced.load(Ordering::Acquire)
    }

    /// Makes retention's and expiry's removals durable, with the store's lock let go for the
    /// fsyncs. Under `sync: never` they wait for the close; under an interval, the interval's
    /// sync covers them.
    pub(super) fn commit_removals(&self) {
        if !self.removals_unsynced.swap(false, Ordering::AcqRel) || self.sync_policy != SyncPolicy::Always {
            return;
        }
        let result = tokio::task::block_in_place(|| self.commit_aside(self.store()).0);
        if let Err(error) = result {
            tracing::error!(stream = %self.name, %error, "cannot sync the removal of acknowledged messages");
        }
    }

    /// Commits aside for what waits for a commit when no batch has made one: segments removals
    /// emptied (an append's limits among them), which the store drops only once a commit made
    /// the floor durable, and seals near their bound, which the next roll would complete under
    /// the lock. Under `sync: never`, between interval syncs or behind an object's chunks no
    /// batch commits. Its fsyncs run without the lock, as every commit's; under `sync: always`
    /// the batches' commits come first.
    pub(super) fn release_segments(&self) {
        let store = self.store();
        if !store.release_waits() {
            return;
        }
        let (result, store) = tokio::task::block_in_place(|| self.commit_aside(store));
        drop(store);
        if let Err(error) = result {
            tracing::error!(stream = %self.name, %error, "cannot commit aside for emptied segments or pending seals");
        }
    }
}
