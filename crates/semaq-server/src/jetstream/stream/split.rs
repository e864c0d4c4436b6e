//! L3 producer snapshots an ingest batch needs (issue 15): the batch is split at the message
//! that needs one, so that the snapshot's fsyncs and write run with the store's lock let go.
//!
//! An L3 stream's producer table must be durable in `producers.json` before a removal could
//! take a message whose entry it does not hold yet. Inside a batch that is: an append the
//! store's limits could answer with an eviction past the snapshot (the batch alone exceeds
//! the limit), an interest stream's drop of a message no consumer wants, a KV rollup's purge
//! and a one-shot schedule's purge. Instead of writing the snapshot in place, under the lock:
//!
//! - before such an append, the batch stops ahead of the message; after such a removal's
//!   message, the removal is not made but held ([`Held`]) and the batch stops after it;
//! - with the lock let go, the snapshot is written as outside ingest ([`Stream::before_removal`]:
//!   its content and a sync ticket taken under the lock, the ticket's fsyncs and the file's
//!   write without it); the ticket covers every append so far and no held removal, which is
//!   not made yet, so it cannot reach the disk before the snapshot that covers it;
//! - under the lock again the held removals are made (lazily, durable with the batch's commit
//!   as before), and the batch goes on from where it stopped.
//!
//! Consumers still never see part of a batch: they deliver nothing past `committed_seq`, which
//! moves only at the batch's commit, after the last part; the batch's PubAcks all wait for that
//! commit too. Stream info and gets may show the first part, and a message whose removal is
//! held, during the snapshot's fsync, as they show any append during its commit's fsync. Inside
//! an atomic batch's appends nothing is held (a rolled-back batch must leave nothing behind,
//! and its messages must not be read half-stored): the ingest task writes the snapshot a
//! rollup or a limit eviction there may need before it takes the lock for the commit
//! ([`Stream::snapshot_before_batch`]), or, when a plain message stored before it in the same
//! ingest batch recorded an entry since, splits the batch before the atomic batch to write it;
//! during the appends only entries from before the batch count (a snapshot then leaves the
//! batch out), so none is written in place (if that failed, a message that still needs one is
//! refused); the drops of the batch's unwanted messages, made once all of it is in, are held
//! as above.

use semaq_store::PurgeRequest;

use super::{store_error, PendingAck, StoreGuard, Stream};
use crate::jetstream::errors::ApiError;

/// A removal an ingest batch made after the L3 producer snapshot.
#[derive(Debug, Clone)]
pub enum Removal {
    /// An interest stream's message no consumer wants.
    Drop(u64),
    /// A KV rollup's or a one-shot schedule's purge.
    Purge(PurgeRequest),
}

/// A removal held until the producer snapshot is durable.
#[derive(Debug)]
pub struct Held {
    /// What to remove.
    pub removal: Removal,
    /// The PubAck of the message that asked for it, which carries a failure (`None`: an
    /// atomic batch's, whose reply is sent by `batches`).
    pub ack: Option<usize>,
}

impl Stream {
    /// Writes the producer snapshot with the store's lock let go, then makes the removals held
    /// for it under the lock, taken again (returned). A removal that fails, or whose snapshot
    /// could not be written (then it is not made: its message stays), turns its message's
    /// PubAck into the error, as the removal made in place did. Also returns why the snapshot
    /// failed, if it did: the batch then refuses what still needs one (`Ingest::snapshot_missing`).
    pub(super) fn make_held<'s>(
        &'s self,
        store: StoreGuard<'s>,
        held: Vec<Held>,
        acks: &mut [PendingAck],
    ) -> (StoreGuard<'s>, Option<String>) {
        let (written, mut store) = self.before_held_removal(store);
        for Held { removal, ack } in held {
            let made = match &written {
                Ok(()) => self.remove_held(store.as_mut(), &removal),
                Err(error) => Err(ApiError::storage(format!("cannot write the producer snapshot: {error}"))),
            };
            let Err(error) = made else { continue };
            match ack.and_then(|index| acks.get_mut(index)) {
                Some((_, outcome, _)) => *outcome = Err(error),
                None => {
                    tracing::error!(stream = %self.name, ?removal, %error, "a batch's removal failed; the messages stay")
                }
            }
        }
        (store, written.err().map(|error| error.to_string()))
    }

    fn remove_held(&self, store: &mut dyn semaq_store::StreamStore, removal: &Removal) -> Result<(), ApiError> {
        match removal {
            Removal::Drop(seq) => store.remove(*seq).map(drop).map_err(store_error),
            Removal::Purge(request) => store.purge_unsynced(request).map(drop).map_err(store_error),
        }
    }
}
