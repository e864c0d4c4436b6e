//! The commit pipeline of a `sync: always` stream below L4: while one commit's fsyncs run on a
//! blocking thread, the ingest task goes on appending the next batches (handed to the OS under
//! the store's lock), so the fsync is no longer on every batch's critical path.
//!
//! - One fsync in flight per stream. The batches appended meanwhile wait as one group (at most
//!   `STREAM_COMMIT_WAITING_MESSAGES_MAX` publishes, then the ingest task stops taking
//!   messages); when the fsync ends, the group's ticket is taken and its fsync starts.
//! - Acks go out in order, each group's only after its own fsync succeeded; `committed_seq`
//!   moves to the group's last sequence then, never earlier.
//! - A failed commit (an EIO, which poisons the store, or a full disk) refuses the acks of its
//!   group and of the group waiting behind it: those were appended after the failure's cause
//!   and never synced. A full disk also drops what was derived from the appends (msg-ids, L3
//!   producers), as an unpipelined commit does.
//! - Appends acknowledged before their fsync (an Object Store's chunks, `defers_sync`) are
//!   committed aside every `STREAM_SYNC_AHEAD_BYTES`, in a commit no ack waits for: the
//!   chunks keep being acknowledged meanwhile, and the object's meta message, whose ack needs
//!   every chunk on disk, finds most of them synced.
//! - Batches that are not pipelined (atomic batches, scheduled copies, L4, other sync
//!   policies) first wait for the pipeline to empty, then commit as before.

use std::time::Instant;

use semaq_store::{StoreError, Synced};
use tokio::task::JoinHandle;

use super::{store_error, Dedup, Inbound, PendingAck, Stream};
use crate::limits;
use crate::sync::lock;

/// Publishes appended together, committed by one fsync.
#[derive(Debug, Default)]
struct Group {
    acks: Vec<PendingAck>,
    /// When the publishes with a reply were captured (publish-to-ack latency).
    captured_at: Vec<Instant>,
    /// The store's last sequence after the group's appends.
    last_seq: u64,
}

/// The commit whose fsyncs run now.
#[derive(Debug)]
struct InFlight {
    group: Group,
    started: Instant,
    task: JoinHandle<Synced>,
}

/// A stream's commits: the one in flight and the group appended behind it.
#[derive(Debug, Default)]
pub(super) struct Pipeline {
    in_flight: Option<InFlight>,
    waiting: Group,
    /// Bytes appended and acknowledged unsynced since the last commit was taken.
    unsynced_bytes: u64,
}

impl Pipeline {
    /// Whether an fsync is in flight.
    pub(super) fn busy(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Whether acks wait for a commit (then every batch's acks wait behind them, in order). A
    /// commit aside that carries none lets unsynced appends be acknowledged meanwhile.
    pub(super) fn acks_waiting(&self) -> bool {
        self.in_flight.as_ref().is_some_and(|in_flight| !in_flight.group.acks.is_empty())
            || !self.waiting.acks.is_empty()
    }

    /// Counts `bytes` appended and acknowledged before their fsync.
    pub(super) fn appended_unsynced(&mut self, bytes: u64) {
        self.unsynced_bytes = self.unsynced_bytes.saturating_add(bytes);
    }

    /// Whether the group waiting behind the fsync is as large as it may grow.
    pub(super) fn full(&self) -> bool {
        self.waiting.acks.len() >= limits::STREAM_COMMIT_WAITING_MESSAGES_MAX
    }

    /// Adds an appended batch's acks (drained) to the group waiting for the next fsync.
    pub(super) fn defer(&mut self, acks: &mut Vec<PendingAck>, captured_at: &mut Vec<Instant>, last_seq: u64) {
        self.waiting.acks.append(acks);
        self.waiting.captured_at.append(captured_at);
        self.waiting.last_seq = last_seq;
    }

    /// The outcome of the fsync in flight; pending forever when there is none (a `select!` arm).
    pub(super) async fn synced(&mut self) -> Option<Synced> {
        match self.in_flight.as_mut() {
            // A panicked fsync task reports nothing: the commit is refused (see `finish`).
            Some(in_flight) => (&mut in_flight.task).await.ok(),
            None => std::future::pending().await,
        }
    }
}

impl Stream {
    /// Whether this stream's commits are pipelined: on file, `sync: always`, below L4 (an L4
    /// batch holds the chain's writer from its first append to its commit, and its checkpoints
    /// follow each commit: it commits unpipelined, the lock let go for the fsync all the same;
    /// the other policies do not fsync per batch).
    pub(super) fn pipelines(&self) -> bool {
        self.sync_policy == crate::options::SyncPolicy::Always && self.provenance.is_none() && self.dir.is_some()
    }

    /// Takes the waiting group's ticket and starts its fsyncs, when nothing is in flight.
    pub(super) fn start_commit(&self, pipeline: &mut Pipeline, dedup: &mut Dedup) {
        if pipeline.busy() || pipeline.waiting.acks.is_empty() {
            return;
        }
        let group = std::mem::take(&mut pipeline.waiting);
        self.launch(pipeline, group, dedup);
    }

    /// Commits the appends acknowledged unsynced aside, with no ack waiting, once
    /// `STREAM_SYNC_AHEAD_BYTES` of them piled up and nothing else is to commit.
    pub(super) fn sync_ahead(&self, pipeline: &mut Pipeline, dedup: &mut Dedup) {
        if pipeline.busy() || pipeline.unsynced_bytes < limits::STREAM_SYNC_AHEAD_BYTES {
            return;
        }
        let last_seq = self.store().state().last_seq;
        self.launch(pipeline, Group { last_seq, ..Group::default() }, dedup);
    }

    /// Takes a ticket for everything appended so far and starts its fsyncs for `group`.
    fn launch(&self, pipeline: &mut Pipeline, group: Group, dedup: &mut Dedup) {
        pipeline.unsynced_bytes = 0;
        let started = Instant::now();
        // No `block_in_place`: taking a ticket hands the group to the OS and runs no fsync.
        let ticket = self.store().sync_begin();
        match ticket {
            Ok(ticket) => {
                let task = tokio::task::spawn_blocking(move || {
                    if !ticket.is_empty() {
                        crate::jetstream::failpoint::sync_delay();
                    }
                    ticket.run()
                });
                pipeline.in_flight = Some(InFlight { group, started, task });
            }
            Err(error) => self.refuse(vec![group], error, dedup),
        }
    }

    /// Records the fsync in flight as done (`synced`), then acknowledges its group or refuses
    /// it and the waiting one; starts the waiting group's commit.
    pub(super) fn finish_commit(&self, pipeline: &mut Pipeline, synced: Option<Synced>, dedup: &mut Dedup) {
        let Some(InFlight { group, started, .. }) = pipeline.in_flight.take() else { return };
        self.services.bus.stats.store_sync_latency.observe(started.elapsed());
        let mut store = self.store();
        let finished = match synced {
            // Records what the ticket synced; no fsync.
            Some(synced) => store.sync_finish_deferring(synced),
            None => Err(StoreError::Poisoned("the fsync task ended without an outcome".into())),
        };
        let checkpoint = match finished {
            Ok(checkpoint) => checkpoint,
            Err(error) => {
                drop(store);
                let waiting = std::mem::take(&mut pipeline.waiting);
                self.refuse(vec![group, waiting], error, dedup);
                return;
            }
        };
        // A commit aside may end after unsynced appends behind it moved the sequence on.
        self.committed_seq.fetch_max(group.last_seq, std::sync::atomic::Ordering::Release);
        let last_seq = store.state().last_seq;
        drop(store);
        // Consumers deliver up to `committed_seq`, which just moved.
        self.last_seq.send_replace(last_seq);
        self.acknowledge(group);
        self.start_commit(pipeline, dedup);
        // At a seal's end: written after the acks, beside the next group's fsyncs, the lock let go.
        if let Some(checkpoint) = checkpoint {
            tokio::task::block_in_place(|| checkpoint.run());
        }
    }

    /// Waits for the fsyncs in flight and the group behind them to be committed.
    pub(super) async fn drain(&self, pipeline: &mut Pipeline, dedup: &mut Dedup) {
        while pipeline.busy() {
            let synced = pipeline.synced().await;
            self.finish_commit(pipeline, synced, dedup);
        }
    }

    fn acknowledge(&self, mut group: Group) {
        self.send_acks(&mut group.acks);
        let (sent, latency) = (Instant::now(), &self.services.bus.stats.publish_ack_latency);
        group.captured_at.drain(..).for_each(|at| latency.observe(sent.saturating_duration_since(at)));
    }

    /// Refuses every publish the groups stored: none of them is known to be on disk.
    fn refuse(&self, groups: Vec<Group>, error: StoreError, dedup: &mut Dedup) {
        if matches!(error, StoreError::OutOfSpace(_)) {
            // The store reloaded what is on disk: what was derived from the appends goes too.
            *dedup = Dedup::default();
            lock(&self.producers).unload();
            // Reports a full disk met by the appends behind this commit, so changes resume.
            let _ = tokio::task::block_in_place(|| self.store().flush());
            tracing::error!(stream = %self.name, %error, "disk full; refusing the acks of the batches not yet committed");
        } else {
            tracing::error!(stream = %self.name, %error, "critical write error; refusing the acks of the batches not yet committed");
        }
        let refusal = store_error(error);
        for mut group in groups {
            for (_, outcome, _) in &mut group.acks {
                if outcome.is_ok() {
                    *outcome = Err(refusal.clone());
                }
            }
            self.send_acks(&mut group.acks);
        }
    }
}

/// Whether a message belongs to an atomic batch (`Nats-Batch-Id`), whose commit is not pipelined.
pub(super) fn is_atomic(message: &Inbound) -> bool {
    let headers = message.headers.as_deref();
    headers.is_some_and(|block| semaq_wire::Headers::new(block).get(super::batch::header::BATCH_ID).is_some())
}
