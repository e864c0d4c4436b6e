//! Purges (the API's `STREAM.PURGE`) commit in three steps, as ingest commits do: the store
//! removes what the request names under its lock (readers see it gone at once), the fsyncs run
//! with the lock let go, and the answer goes out only after the commit recorded them. So
//! stream info, message and direct gets and consumers of the stream are answered while a
//! purge's fsync runs, and a purge is never answered before it is durable.

use semaq_store::PurgeRequest;

use super::{store_error, Stream};
use crate::jetstream::errors::ApiError;

impl Stream {
    /// Purges stored messages (the API's `STREAM.PURGE`), durable when it returns. An
    /// unfiltered purge to a `seq` past the end also moves the stream there, as nats-server's
    /// compaction does: the next message gets `seq` (first_seq `seq`, last_seq `seq - 1`).
    /// The fsyncs run with the store's lock let go (L4 streams' too, as their commits).
    pub fn purge(&self, request: &PurgeRequest) -> Result<u64, ApiError> {
        // L3: the producer snapshot first, its fsyncs with the lock let go too (`snapshot.rs`).
        let (snapshot, mut store) = self.before_removal(self.store(), u64::MAX);
        snapshot.map_err(ApiError::storage)?;
        let purged = store.purge_unsynced(request).map_err(store_error)?;
        let everything = matches!(request.subject.as_deref(), None | Some(">"));
        if let (true, None, Some(seq)) = (everything, request.keep, request.up_to_seq) {
            if seq > store.state().last_seq.saturating_add(1) {
                store.skip_to_unsynced(seq).map_err(store_error)?;
            }
        }
        let state = store.state();
        let purged_subject = request.subject.as_deref().filter(|_| !everything);
        let filtered_first = purged_subject
            .and_then(|subject| store.get_next(state.first_seq, Some(subject)).ok().flatten())
            .map(|message| message.seq);
        // Blocks for the disk: let the runtime move other tasks off this worker meanwhile.
        let (committed, store) = tokio::task::block_in_place(|| self.commit_aside(store));
        drop(store);
        committed.map_err(store_error)?;
        // Lock order: a consumer's state before the store (released above).
        for consumer in self.consumers() {
            consumer.stream_purged(purged_subject, state.first_seq, filtered_first, state.last_seq);
        }
        Ok(purged)
    }
}
