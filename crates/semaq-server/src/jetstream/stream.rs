//! One stream: captures the messages published to its subjects, checks them (dedup, expected
//! headers, limits), appends them to its store with group commit, acknowledges them, and wakes
//! its consumers.
//!
//! Publishers never touch the store: the stream's subscription queues each message (bounded)
//! and one ingest task per stream drains the queue in batches. A batch is appended, synced
//! once (when the stream syncs always), and only then are its PubAcks sent, so an
//! acknowledged message is on disk and concurrent publishers share one fsync. The fsync runs
//! without the store's lock and, for `sync: always` file streams below L4, in parallel with the
//! appends of the next batches (`pipeline.rs`).
//!
//! Every message is checked and stored by `Stream::ingest_one`: L2 schema, L3 producer
//! sequence (`producers.rs`), then dedup, expected headers and limits. Atomic batches
//! (`batch.rs`) are staged first and, on commit, stored through the same function, one message
//! after another, or not at all.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use semaq_store::{StoreError, StreamState, StreamStore};
use semaq_wire::{clock, Headers};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use super::batch::{self, Batches, Route};
use super::config::StreamConfig;
use super::consumer::Consumer;
use super::errors::ApiError;
use super::producers::{self, Producers, Verdict};
use std::fmt::Write as _;

use super::account::Quota;
use super::schema::SchemaCheck;
use crate::delivery::{FlushSet, InternalSink, Message, Subscription};
use crate::limits;
use crate::options::SyncPolicy;
use crate::stats::{bump, PublishCounters, Refusal};
use crate::sync::{self, lock};

mod ingest;
mod pipeline;
mod purge;
mod retention;
mod snapshot;
pub(in crate::jetstream) mod split;
pub use ingest::pub_ack_json;
use pipeline::Pipeline;

/// The stream's store, locked.
type StoreGuard<'s> = std::sync::MutexGuard<'s, Box<dyn StreamStore>>;

/// Headers JetStream publishers may set.
pub mod header {
    pub use semaq_wire::headers::names::{
        EXPECTED_LAST_MSG_ID, EXPECTED_LAST_SEQUENCE, EXPECTED_LAST_SUBJECT_SEQUENCE, EXPECTED_STREAM, MSG_ID,
    };
}

/// A message waiting to be stored.
#[derive(Debug)]
pub struct Inbound {
    /// Subject it was published to.
    pub subject: String,
    /// Where the PubAck goes.
    pub reply: Option<String>,
    /// Raw header block.
    pub headers: Option<Bytes>,
    /// Body.
    pub payload: Bytes,
    /// The publishing connection's id (L2 streams record its name as the producer).
    pub publisher: Option<u64>,
    /// When the stream captured it (the publish-to-ack latency is measured from here).
    pub received: Instant,
    /// The publish's trace context, when the publish is traced.
    pub trace: Option<crate::trace::Carried>,
    /// Written by the server itself (a schedule's copy): a client's publish checks do not apply.
    pub internal: bool,
}

impl Inbound {
    /// Its subject, header block and body, in bytes: what it costs the ingest queue's budget.
    pub fn size(&self) -> usize {
        self.subject.len() + self.headers.as_ref().map_or(0, Bytes::len) + self.payload.len()
    }
}

impl Inbound {
    /// Whether a mirror or source follower copied it here from another stream.
    pub fn is_sourced(&self) -> bool {
        self.reply.as_deref().is_some_and(|reply| reply.starts_with(super::sources::ACK_PREFIX))
    }
}

/// The outcome of one publish: `seq` and whether it was a duplicate, or why it was refused.
pub type PublishOutcome = Result<(u64, bool), ApiError>;

/// A PubAck to send: the reply subject, the outcome, and a counter stream's new value (`val`).
pub type PendingAck = (Option<String>, PublishOutcome, Option<String>);

/// Recent `Nats-Msg-Id`s within the duplicate window, oldest first.
#[derive(Debug, Default)]
pub struct Dedup {
    /// Whether the window was rebuilt from the store since start (see [`recover_dedup`]).
    loaded: bool,
    by_id: HashMap<String, u64>,
    order: VecDeque<(i64, String)>,
    last_msg_id: Option<String>,
}

impl Dedup {
    fn expire(&mut self, now_ns: i64, window_ns: i64) {
        while let Some((stored_ns, _)) = self.order.front() {
            let expired = now_ns - stored_ns > window_ns || self.order.len() > limits::DEDUP_IDS_MAX;
            if !expired {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                self.by_id.remove(&id);
            }
        }
    }

    fn record(&mut self, id: &str, seq: u64, now_ns: i64) {
        self.by_id.insert(id.to_string(), seq);
        self.order.push_back((now_ns, id.to_string()));
        self.last_msg_id = Some(id.to_string());
    }

    /// Forgets every id recorded after `mark` (an atomic batch that was refused midway).
    fn rollback(&mut self, (length, last_msg_id): DedupMark) {
        while self.order.len() > length {
            if let Some((_, id)) = self.order.pop_back() {
                self.by_id.remove(&id);
            }
        }
        self.last_msg_id = last_msg_id;
    }
}

/// Where the dedup window stood: its length and the last message id.
pub type DedupMark = (usize, Option<String>);

/// Rebuilds the dedup window from the stored messages of the last `window_ns` (reading their
/// headers), as it is needed: only once a message with `Nats-Msg-Id` or
/// `Nats-Expected-Last-Msg-Id` arrives, so streams that never use ids restart without reading
/// their recent payloads (nats-server loads it lazily too).
fn recover_dedup(store: &dyn StreamStore, window_ns: i64) -> Dedup {
    let mut dedup = Dedup { loaded: true, ..Dedup::default() };
    let state = store.state();
    let oldest_ns = clock::unix_nanos_now() - window_ns;
    let mut seq = state.last_seq;
    let mut found = Vec::new();
    let mut newest_has_id = None;
    while seq >= state.first_seq && seq > 0 && found.len() < limits::DEDUP_IDS_MAX {
        match store.get(seq) {
            Ok(Some(message)) if message.timestamp_ns < oldest_ns => break,
            Ok(Some(message)) => {
                let id =
                    message.headers.as_deref().and_then(|h| Headers::new(h).get(header::MSG_ID)).map(str::to_string);
                newest_has_id.get_or_insert(id.is_some());
                if let Some(id) = id {
                    found.push((message.timestamp_ns, id, message.seq));
                }
            }
            _ => {}
        }
        seq -= 1;
    }
    for (timestamp_ns, id, seq) in found.into_iter().rev() {
        dedup.record(&id, seq, timestamp_ns);
    }
    if newest_has_id == Some(false) {
        dedup.last_msg_id = None;
    }
    dedup
}

/// A stream and its store.
pub struct Stream {
    /// Stream name.
    pub name: String,
    /// Shared so readers on hot paths (acks, ingest) clone a pointer, not the config.
    config: RwLock<Arc<StreamConfig>>,
    /// When it was created.
    pub created: SystemTime,
    store: Mutex<Box<dyn StreamStore>>,
    sync_policy: SyncPolicy,
    ingest: mpsc::Sender<Inbound>,
    ingest_budget: sync::ByteBudget,
    /// The last stored sequence, watched by consumers.
    last_seq: watch::Sender<u64>,
    subscriptions: Mutex<Vec<Arc<Subscription>>>,
    consumers: Mutex<std::collections::BTreeMap<String, Arc<Consumer>>>,
    /// L3 idempotent producers. Lock order: after `store`.
    producers: Mutex<Producers>,
    /// Held by the ingest task while it stores a batch, and by a removal whose producer
    /// snapshot steady ingest kept stale, for one last round (`stream/snapshot.rs`): the only
    /// way to stop new producer entries without the store's lock. Lock order: before `store`.
    ingest_gate: Mutex<()>,
    dir: Option<std::path::PathBuf>,
    stop: tokio::sync::Notify,
    services: Arc<super::Services>,
    /// The JetStream that owns this stream (weak: it holds the stream).
    jetstream: Weak<super::JetStream>,
    /// Level 4: the hash chain and its checkpoints.
    provenance: Option<Arc<super::provenance::Provenance>>,
    /// Level 4: recent `Nats-Msg-Id`s, for `Semaq-Parent` ids. Lock order: after `store`.
    msg_ids: super::lineage::MsgIds,
    /// Publishes stored, acknowledged as duplicates, and refused by reason (`/metrics`).
    pub publishes: PublishCounters,
    /// Messages with a `Nats-TTL`, by expiry. Lock order: after `store`.
    expiries: Mutex<super::kv::Expiries>,
    /// Scheduled messages waiting, by subject. Lock order: after `store`.
    schedules: Mutex<super::schedules::Table>,
    /// The stored bytes last seen, for other streams' account quota while the store is busy.
    stored_bytes: std::sync::atomic::AtomicU64,
    /// The last sequence whose batch was committed (fsynced under `sync: always`): consumers
    /// deliver nothing past it, so a message a crash could still take is never delivered and
    /// acknowledged, and its sequence never handed out twice.
    committed_seq: std::sync::atomic::AtomicU64,
    /// Retention removed messages (acknowledged in a work queue or interest stream) that are
    /// not yet durable: the ingest task commits them on its next limits tick (`retention.rs`).
    removals_unsynced: std::sync::atomic::AtomicBool,
}

/// What storing one ingest batch works with, under the stream's store lock.
pub struct Ingest<'a, 'c> {
    /// The stream's config, read once per batch.
    pub config: &'a StreamConfig,
    /// The store (its lock is held).
    pub store: &'a mut dyn StreamStore,
    dedup: &'a mut Dedup,
    /// L3 producers (their lock is held, after the store's).
    pub producers: &'a mut Producers,
    /// L2: the bound schema, resolved once per batch (mutable: L4 auto-evolution may widen it).
    pub schema: Option<&'a mut SchemaCheck>,
    /// L4: the hash chain writer (its lock is held, after the store's).
    pub chain: Option<&'a mut super::provenance::ChainWriter<'c>>,
    interest: Option<&'a [Arc<super::config::ConsumerConfig>]>,
    /// When the batch is stored (unix ns).
    pub now: i64,
    window_ns: i64,
    /// While an atomic batch is appended: messages no consumer wants, dropped once the whole
    /// batch is in (so its last message is always there for the crash check at start-up).
    pub deferred_deletes: Option<Vec<u64>>,
    /// The account's and the server's byte limits (`None`: unlimited).
    quota: Option<Quota>,
    /// L3: removals that need the producer snapshot first, held until the ingest task has
    /// written it with the store's lock let go (`stream/split.rs`); `None` inside an atomic
    /// batch's appends, where nothing can be held (one that needs it is refused).
    pub(in crate::jetstream) held: Option<Vec<split::Held>>,
    /// L3: why the last producer snapshot written for this ingest batch with the store's lock
    /// let go failed, if it did: one it still needs is then refused, never written in place
    /// with its fsyncs under the lock.
    pub(in crate::jetstream) snapshot_failed: Option<String>,
    /// Whether a stored message purged (`Ingest::purge`): under the policies that acknowledge
    /// without an fsync, the batch then commits before its acks all the same.
    pub(in crate::jetstream) purged: bool,
}

impl Ingest<'_, '_> {
    /// Drops a stored message that no consumer of an interest stream wants (after an L3 producer
    /// snapshot when the message is newer than the last one).
    pub fn drop_unwanted(&mut self, seq: u64) -> Result<(), ApiError> {
        if self.holds(seq, split::Removal::Drop(seq))? {
            return Ok(());
        }
        // Lazily: the batch's own commit (or, under the other policies, the next sync) makes the
        // removal durable with the append, so no fsync runs here under the stream's lock.
        self.store.remove(seq).map_err(store_error)?;
        Ok(())
    }

    /// A purge made by a stored message (a KV rollup, a one-shot schedule's copy), after the L3
    /// producer snapshot when it may remove what that does not cover yet. Lazy, with no fsync
    /// under the store's lock: the batch's commit makes it durable with the message that caused
    /// it, before the PubAck (under `sync: always` the commit it has anyway; under the other
    /// policies one made for it, `purged`, since a purge a crash lost would bring the purged
    /// revisions back).
    pub fn purge(&mut self, request: semaq_store::PurgeRequest) -> Result<(), ApiError> {
        if self.holds(u64::MAX, split::Removal::Purge(request.clone()))? {
            return Ok(());
        }
        self.store.purge_unsynced(&request).map_err(store_error)?;
        self.purged = true;
        Ok(())
    }

    /// L3: whether removing `seq` (`u64::MAX`: any) must wait for the producer snapshot and
    /// was held for the ingest task to make after writing it without the lock; where nothing
    /// is held (an atomic batch's appends) the removal is refused (`snapshot_missing`).
    fn holds(&mut self, seq: u64, removal: split::Removal) -> Result<bool, ApiError> {
        if !self.config.exactly_once() || !self.producers.removal_needs_snapshot(seq) {
            return Ok(false);
        }
        if let Some(held) = self.held.as_mut() {
            held.push(split::Held { removal, ack: None });
            return Ok(true);
        }
        Err(self.snapshot_missing())
    }

    /// L3: a producer snapshot needed where none can be written without the store's lock (an
    /// atomic batch's appends, inside which nothing can be held): the message is refused, with
    /// the unlocked attempt's failure, as a held removal whose snapshot failed is. It is written
    /// before such a batch (`snapshot_before_batch`, or a split before the atomic batch,
    /// `commit_needs_snapshot`), so only a failure of that leads here; never written in place.
    pub(in crate::jetstream) fn snapshot_missing(&self) -> ApiError {
        let reason = self.snapshot_failed.as_deref().unwrap_or("not written before the atomic batch");
        ApiError::storage(format!("cannot write the producer snapshot: {reason}"))
    }

    /// Whether `id` is in the dedup window (rebuilding the window first if needed).
    pub fn knows_msg_id(&mut self, id: &str) -> bool {
        if !self.dedup.loaded {
            *self.dedup = recover_dedup(self.store, self.window_ns);
            self.dedup.expire(self.now, self.window_ns);
        }
        self.dedup.by_id.contains_key(id)
    }

    /// Where the dedup window stands, to undo what follows.
    pub fn dedup_mark(&self) -> DedupMark {
        (self.dedup.order.len(), self.dedup.last_msg_id.clone())
    }

    /// Undoes the dedup records made since `mark`.
    pub fn dedup_rollback(&mut self, mark: DedupMark) {
        self.dedup.rollback(mark);
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Stream {
    /// Wraps an opened store and starts the ingest task; subscriptions are made by [`Stream::capture`].
    pub fn start(
        config: StreamConfig,
        created: SystemTime,
        store: Box<dyn StreamStore>,
        sync_policy: SyncPolicy,
        dir: Option<std::path::PathBuf>,
        (services, jetstream): (Arc<super::Services>, Weak<super::JetStream>),
        provenance: Option<Arc<super::provenance::Provenance>>,
    ) -> Arc<Self> {
        let (ingest, inbound) = mpsc::channel(limits::STREAM_INGEST_QUEUE_MESSAGES_MAX);
        let mut store = store;
        let mut producers = Producers::new(dir.as_deref());
        if config.exactly_once() {
            producers.ensure_loaded(store.as_mut(), clock::unix_nanos_now());
        }
        let (first_seq, last_seq) = (store.state().first_seq, store.state().last_seq);
        let stored_bytes = store.state().bytes;
        let stream = Arc::new(Self {
            name: config.name.clone(),
            config: RwLock::new(Arc::new(config)),
            created,
            store: Mutex::new(store),
            sync_policy,
            ingest,
            ingest_budget: sync::ByteBudget::new(limits::STREAM_INGEST_QUEUE_BYTES_MAX),
            last_seq: watch::channel(last_seq).0,
            subscriptions: Mutex::new(Vec::new()),
            consumers: Mutex::new(std::collections::BTreeMap::new()),
            producers: Mutex::new(producers),
            ingest_gate: Mutex::new(()),
            dir,
            stop: tokio::sync::Notify::new(),
            services,
            jetstream,
            provenance,
            msg_ids: super::lineage::MsgIds::new(last_seq, clock::unix_nanos_now()),
            publishes: PublishCounters::default(),
            expiries: Mutex::new(super::kv::Expiries::rebuild_from(first_seq, last_seq)),
            schedules: Mutex::new(super::schedules::Table::default()),
            stored_bytes: std::sync::atomic::AtomicU64::new(stored_bytes),
            committed_seq: std::sync::atomic::AtomicU64::new(last_seq),
            removals_unsynced: std::sync::atomic::AtomicBool::new(false),
        });
        // A new stream has nothing to rebuild; a restored one rebuilds on first use.
        let dedup = Dedup { loaded: last_seq == 0, ..Dedup::default() };
        tokio::spawn(Arc::clone(&stream).ingest_loop(inbound, dedup));
        if stream.provenance.is_some() {
            tokio::spawn(super::provenance::run_ticker(Arc::downgrade(&stream)));
        }
        stream
    }

    /// The per-message TTL index.
    pub fn expiries(&self) -> std::sync::MutexGuard<'_, super::kv::Expiries> {
        lock(&self.expiries)
    }

    /// Stores a message the server writes itself (a delete marker): no reply, no publisher.
    pub fn enqueue_internal(&self, subject: &str, headers: Bytes) -> bool {
        let size = subject.len() + headers.len();
        if !self.ingest_budget.try_take(size) {
            return false;
        }
        let inbound = Inbound {
            subject: subject.to_string(),
            reply: None,
            headers: Some(headers),
            payload: Bytes::new(),
            publisher: None,
            received: Instant::now(),
            trace: None,
            internal: false,
        };
        if self.ingest.try_send(inbound).is_err() {
            self.ingest_budget.give_back(size);
            return false;
        }
        true
    }

    /// Level 4: the `Nats-Msg-Id`s stored recently (lineage resolves parents with them).
    pub fn msg_ids(&self) -> &super::lineage::MsgIds {
        &self.msg_ids
    }

    /// Level 4: the stream's hash chain and checkpoints.
    pub fn provenance(&self) -> Option<Arc<super::provenance::Provenance>> {
        self.provenance.clone()
    }

    /// Level 4: signs what was stored since the last checkpoint and writes the checkpoints
    /// whose messages a commit made durable; the others are written by the commit running now.
    pub fn checkpoint_pending(&self) {
        if let Some(provenance) = &self.provenance {
            let _store = self.store();
            provenance.checkpoint_pending(self.committed_seq());
        }
    }

    /// The current configuration.
    pub fn config(&self) -> Arc<StreamConfig> {
        sync::read(&self.config).clone()
    }

    /// Replaces the configuration (already validated) and re-subscribes to its subjects.
    pub fn set_config(self: &Arc<Self>, config: StreamConfig) -> Result<(), ApiError> {
        let limits = super::store_limits(&config);
        let (snapshot, mut store) = self.before_removal(self.store(), u64::MAX);
        snapshot.map_err(ApiError::storage)?;
        // No fsync under the lock: the next commit (the limits tick's, when nothing is
        // published) makes the removals durable and gives back the segments they emptied, and
        // an open before it applies the persisted limits again.
        store.update_limits(limits).map_err(ApiError::storage)?;
        drop(store);
        *sync::write(&self.config) = Arc::new(config);
        self.release();
        self.capture();
        Ok(())
    }

    /// The store, for reads by the API and consumers.
    pub fn store(&self) -> std::sync::MutexGuard<'_, Box<dyn StreamStore>> {
        lock(&self.store)
    }

    /// The bytes stored, for another stream's account quota: read now when the store is free,
    /// else as last seen (its ingest is storing a batch: waiting would tie the two streams'
    /// fsyncs together).
    pub fn stored_bytes(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        match self.store.try_lock() {
            Ok(store) => {
                let bytes = store.state().bytes;
                self.stored_bytes.store(bytes, Relaxed);
                bytes
            }
            Err(_) => self.stored_bytes.load(Relaxed),
        }
    }

    /// The last sequence consumers may deliver: stored and committed (see `committed_seq`).
    pub fn committed_seq(&self) -> u64 {
        self.committed_seq.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Counts and bounds.
    pub fn state(&self) -> StreamState {
        self.store().state()
    }

    /// Receiver that changes whenever a message is stored.
    pub fn watch_last_seq(&self) -> watch::Receiver<u64> {
        self.last_seq.subscribe()
    }

    /// Tells consumers that the stored messages changed (after deletes and purges too).
    pub fn notify_changed(&self) {
        let last = self.state().last_seq;
        self.last_seq.send_replace(last);
    }

    /// Subscribes the stream to its subjects.
    pub fn capture(self: &Arc<Self>) {
        let config = self.config();
        let transform = (config.subject_transform.as_ref())
            .and_then(|t| crate::transform::Transform::new(&t.source, &t.destination).ok().flatten());
        let sink: Arc<dyn InternalSink> = Arc::new(Capture { stream: Arc::downgrade(self), transform });
        let mut subscriptions = lock(&self.subscriptions);
        for subject in &config.subjects {
            match self.services.bus.subscribe_internal(subject, None, sink.clone()) {
                Ok(subscription) => subscriptions.push(subscription),
                Err(error) => tracing::warn!(stream = %self.name, %subject, %error, "cannot capture subject"),
            }
        }
    }

    /// Unsubscribes the stream from its subjects.
    pub fn release(&self) {
        for subscription in lock(&self.subscriptions).drain(..) {
            self.services.bus.unsubscribe_internal(&subscription);
        }
    }

    /// Stops capturing, ingesting and every consumer; what was stored is synced and the store closed.
    pub fn stop(&self) {
        self.release();
        for consumer in self.consumers() {
            consumer.stop();
            consumer.save_state();
        }
        let mut store = self.store();
        // Aside: the ingest task's commits in flight hear of a full disk this meets.
        match store.sync_aside() {
            // Everything stored is durable: the final checkpoint may sign it all.
            Ok(()) => self.committed_seq.store(store.state().last_seq, std::sync::atomic::Ordering::Release),
            Err(error) => tracing::error!(stream = %self.name, %error, "sync at stop failed"),
        }
        drop(self.snapshot_producers(store));
        self.checkpoint_pending();
        self.provenance.iter().for_each(|provenance| provenance.sync_log());
        self.stop.notify_one();
    }

    /// The handles outside JetStream (the bus, the registry, the filters).
    pub fn services(&self) -> &Arc<super::Services> {
        &self.services
    }

    /// The JetStream that owns this stream, while it runs.
    pub fn jetstream(&self) -> Option<Arc<super::JetStream>> {
        self.jetstream.upgrade()
    }

    /// Where the stream keeps its files (`None` for memory streams).
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.dir.as_deref()
    }

    /// All consumers, by name.
    pub fn consumers(&self) -> Vec<Arc<Consumer>> {
        lock(&self.consumers).values().cloned().collect()
    }

    /// A consumer by name.
    pub fn consumer(&self, name: &str) -> Option<Arc<Consumer>> {
        lock(&self.consumers).get(name).cloned()
    }

    /// Consumers attached.
    pub fn consumer_count(&self) -> usize {
        lock(&self.consumers).len()
    }

    /// Registers a started consumer.
    pub fn add_consumer(&self, consumer: Arc<Consumer>) {
        lock(&self.consumers).insert(consumer.name.clone(), consumer);
    }

    /// Stops and forgets a consumer, removing its files; false when there was none.
    pub fn remove_consumer(&self, name: &str) -> bool {
        let Some(consumer) = lock(&self.consumers).remove(name) else { return false };
        consumer.stop();
        consumer.remove_files();
        true
    }

    fn duplicate_window_ns(&self) -> i64 {
        let window = self.config().duplicate_window;
        if window > 0 {
            window
        } else {
            super::config::DUPLICATE_WINDOW_DEFAULT_NS
        }
    }

    /// Queues a copy from a mirror's or source's origin (`sources.rs`), acknowledged to `reply`.
    pub(super) fn enqueue_sourced(&self, subject: &str, reply: &str, headers: Option<&[u8]>, payload: &[u8]) -> bool {
        self.enqueue(&Message { subject, reply: Some(reply), headers, payload, publisher: None })
    }

    /// Queues a published message; false when the queue is full or the stream stopped.
    fn enqueue(&self, message: &Message<'_>) -> bool {
        let mut trace = None;
        if crate::trace::in_traced_publish() {
            let capture = crate::trace::capture(&self.name, message.subject);
            if capture.skip {
                return true;
            }
            trace = capture.carried;
        }
        let size = message.subject.len() + message.headers.map_or(0, <[u8]>::len) + message.payload.len();
        if !self.ingest_budget.try_take(size) {
            self.publishes.refuse(Refusal::QueueFull);
            return false;
        }
        let (headers, payload) = copy_body(message.headers, message.payload);
        let inbound = Inbound {
            subject: message.subject.to_string(),
            reply: message.reply.map(str::to_string),
            headers,
            payload,
            publisher: message.publisher,
            received: Instant::now(),
            trace,
            internal: false,
        };
        if self.ingest.try_send(inbound).is_err() {
            self.ingest_budget.give_back(size);
            self.publishes.refuse(Refusal::QueueFull);
            return false;
        }
        true
    }

    async fn ingest_loop(self: Arc<Self>, mut inbound: mpsc::Receiver<Inbound>, mut dedup: Dedup) {
        let mut batch = Vec::with_capacity(limits::STREAM_INGEST_BATCH_MESSAGES_MAX);
        let mut acks = Vec::with_capacity(limits::STREAM_INGEST_BATCH_MESSAGES_MAX);
        let mut captured_at = Vec::with_capacity(limits::STREAM_INGEST_BATCH_MESSAGES_MAX);
        let mut batches = Batches::default();
        let interval = match self.sync_policy {
            SyncPolicy::Interval(every) => every,
            _ => Duration::from_secs(3600),
        };
        let mut sync_timer = tokio::time::interval(interval);
        let mut limits_timer = tokio::time::interval(limits::STREAM_LIMITS_CHECK_INTERVAL);
        let mut producers_timer = tokio::time::interval(limits::PRODUCER_SNAPSHOT_INTERVAL);
        let mut pipeline = Pipeline::default();
        loop {
            tokio::select! {
                _ = limits_timer.tick() => {
                    self.enforce_limits();
                    if self.removals_pending() {
                        // Behind the commits in flight, which were taken before the removals.
                        self.drain(&mut pipeline, &mut dedup).await;
                        self.commit_removals();
                    }
                    if !pipeline.busy() {
                        // A commit in flight gives them back itself.
                        self.release_segments();
                    }
                    if self.config().allow_msg_schedules {
                        // Scheduled copies commit unpipelined, behind the commits in flight.
                        self.drain(&mut pipeline, &mut dedup).await;
                    }
                    self.fire_schedules(&mut dedup, &mut batches, &mut acks);
                    batches.expire(self.config().batch_timeout(), std::time::Instant::now());
                    batches.send_replies(&self);
                }
                synced = pipeline.synced() => self.finish_commit(&mut pipeline, synced, &mut dedup),
                received = inbound.recv_many(&mut batch, limits::STREAM_INGEST_BATCH_MESSAGES_MAX), if !pipeline.full() => {
                    if received == 0 {
                        break;
                    }
                    captured_at.extend(batch.iter().filter(|m| m.reply.is_some()).map(|m| m.received));
                    // Atomic batches' replies are sent by `batches`: they commit unpipelined.
                    let pipelined = self.pipelines() && !batch.iter().any(pipeline::is_atomic);
                    if !pipelined {
                        self.drain(&mut pipeline, &mut dedup).await;
                    }
                    let commits = pipelined.then_some(&pipeline);
                    let batch_bytes: usize = if pipelined { batch.iter().map(Inbound::size).sum() } else { 0 };
                    let mut store_batch = || self.store_batch(&mut batch, (&mut dedup, &mut batches), &mut acks, commits);
                    // Unpipelined, the batch's fsync runs in there: the runtime moves this worker's
                    // other tasks off meanwhile. Pipelined, the batch is only appended and handed to
                    // the OS (its fsync runs on a blocking thread), and moving the worker would cost
                    // two thread switches per batch, more than the appends.
                    let deferred = if pipelined { store_batch() } else { tokio::task::block_in_place(store_batch) };
                    if let Some(last_seq) = deferred {
                        pipeline.defer(&mut acks, &mut captured_at, last_seq);
                        self.start_commit(&mut pipeline, &mut dedup);
                        continue;
                    }
                    if pipelined {
                        pipeline.appended_unsynced(batch_bytes as u64);
                        self.sync_ahead(&mut pipeline, &mut dedup);
                    }
                    self.send_acks(&mut acks);
                    batches.send_replies(&self);
                    let (sent, latency) = (Instant::now(), &self.services.bus.stats.publish_ack_latency);
                    captured_at.drain(..).for_each(|at| latency.observe(sent.saturating_duration_since(at)));
                }
                _ = self.stop.notified() => break,
                _ = sync_timer.tick(), if matches!(self.sync_policy, SyncPolicy::Interval(_)) => {
                    let (synced, store) = tokio::task::block_in_place(|| self.commit_aside(self.store()));
                    drop(store);
                    if let Err(error) = synced {
                        tracing::error!(stream = %self.name, %error, "sync failed");
                    }
                }
                _ = producers_timer.tick() => {
                    tokio::task::block_in_place(|| drop(self.snapshot_producers(self.store())));
                }
            }
        }
        self.drain(&mut pipeline, &mut dedup).await;
        if let Err(error) = self.store().close() {
            tracing::error!(stream = %self.name, %error, "closing the store failed");
        }
    }

    /// Removes what has grown too old (max_age); other limits apply on append.
    fn enforce_limits(&self) {
        let config = self.config();
        let now = clock::unix_nanos_now();
        if config.allow_msg_ttl {
            let expired = super::kv::expire_ttls(self, self.store().as_mut(), now);
            if expired > 0 {
                self.removals_made();
                self.notify_changed();
            }
        }
        let max_age = config.max_age;
        if max_age <= 0 {
            return;
        }
        // L3: expiry must not take a message the producer snapshot does not cover.
        let (snapshot, mut store) = self.before_expiry(self.store(), max_age, now);
        if let Err(error) = snapshot {
            tracing::error!(stream = %self.name, %error, "not expiring: producer snapshot failed");
            return;
        }
        let markers = super::kv::aging_out_last(&config, store.as_ref(), now);
        let removed = store.enforce_limits(now);
        drop(store);
        for subject in &markers {
            super::kv::leave_marker(self, &config, subject);
        }
        match removed {
            Ok(0) => {}
            Ok(_) => {
                // The store ran no fsync for them: the tick commits them, without the lock.
                self.removals_made();
                if self.sync_policy == SyncPolicy::Never {
                    // Nothing else commits such a stream before its close, and the segments
                    // expiry emptied are given back only at a commit.
                    let committed = tokio::task::block_in_place(|| self.commit_aside(self.store()).0);
                    if let Err(error) = committed {
                        tracing::error!(stream = %self.name, %error, "cannot sync what expired");
                    }
                }
                self.notify_changed();
            }
            Err(error) => tracing::error!(stream = %self.name, %error, "enforcing limits failed"),
        }
    }

    /// Deletes one stored message (the API's `MSG.DELETE`), durable when it returns; the fsync
    /// runs with the store's lock let go (L4 streams' too: the chain is in the records, which a
    /// removal does not change, and checkpoints sign only what a commit made durable).
    pub fn delete_message(&self, seq: u64) -> Result<bool, ApiError> {
        let (snapshot, mut store) = self.before_removal(self.store(), seq);
        snapshot.map_err(ApiError::message_delete_failed)?;
        let removed = store.remove(seq).map_err(ApiError::message_delete_failed)?;
        let (committed, _store) = tokio::task::block_in_place(|| self.commit_aside(store));
        committed.map_err(ApiError::message_delete_failed)?;
        Ok(removed)
    }

    /// L3 producers for stream info: `{count, gaps, last_gap}`, or `None` below L3.
    pub fn producers_info(&self) -> Option<Value> {
        let producers = lock(&self.producers);
        producers.is_loaded().then(|| producers.info())
    }
}

/// Copies a message's header block and payload out of the connection's buffer in one
/// allocation (two views of it), rather than one per part.
fn copy_body(headers: Option<&[u8]>, payload: &[u8]) -> (Option<Bytes>, Bytes) {
    let Some(headers) = headers else { return (None, Bytes::copy_from_slice(payload)) };
    let mut body = bytes::BytesMut::with_capacity(headers.len() + payload.len());
    body.extend_from_slice(headers);
    body.extend_from_slice(payload);
    let mut payload = body.freeze();
    let headers = payload.split_to(headers.len());
    (Some(headers), payload)
}

/// Maps a store refusal to nats-server's error.
pub fn store_error(error: StoreError) -> ApiError {
    match error {
        StoreError::MaxMsgs => ApiError::max_messages(),
        StoreError::MaxBytes => ApiError::max_bytes(),
        StoreError::MaxMsgsPerSubject => ApiError::max_messages_per_subject(),
        StoreError::MessageTooLarge { .. } => ApiError::message_too_large(),
        StoreError::OutOfSpace(_) => ApiError::insufficient_resources(),
        other => ApiError::storage(other),
    }
}

/// The subscription through which a stream captures its subjects.
#[derive(Debug)]
struct Capture {
    stream: Weak<Stream>,
    /// The stream's `subject_transform`: a matching subject is stored as rewritten.
    transform: Option<crate::transform::Transform>,
}

impl InternalSink for Capture {
    fn receive(&self, message: &Message<'_>) -> bool {
        let Some(stream) = self.stream.upgrade() else { return false };
        match self.transform.as_ref().and_then(|transform| transform.apply(message.subject)) {
            Some(subject) => stream.enqueue(&Message { subject: &subject, ..*message }),
            None => stream.enqueue(message),
        }
    }
}

/// Whether `subject` is an Object Store chunk (`$O.<bucket>.C.<nuid>` on stream `OBJ_<bucket>`)
/// whose fsync may wait for its object's meta message. Clients write an object as its chunks,
/// each acknowledged before the next, then the meta message that makes the object exist; the
/// sync before the meta's ack makes every chunk written before it durable too (a sync covers
/// the whole log), so an acknowledged object is still on disk while a chunk's own ack means
/// "written" (as `semaq.sync: never` acks do). Streams that set `semaq.sync` themselves, and
/// L3 and above, keep one sync per acknowledged batch.
fn defers_sync(config: &StreamConfig, subject: &str) -> bool {
    let Some(bucket) = config.name.strip_prefix("OBJ_") else { return false };
    let chunk = subject.strip_prefix("$O.").and_then(|rest| rest.strip_prefix(bucket));
    chunk.is_some_and(|rest| rest.starts_with(".C."))
        && !config.metadata.contains_key(super::config::SYNC_KEY)
        && !config.exactly_once()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_nats_servers_insufficient_resources_and_a_failed_write_a_storage_error() {
        let full = store_error(StoreError::OutOfSpace("write x: No space left on device (os error 28)".into()));
        assert_eq!((full.code, full.err_code), (500, 10047));
        assert_eq!(full.description, "insufficient storage resources available");
        let failed = store_error(StoreError::Poisoned("fsync x: Input/output error (os error 5)".into()));
        assert_eq!(failed.err_code, 10077);
        assert!(failed.description.contains("fsync"), "the reason reaches the client: {}", failed.description);
    }

    /// An ingest over a file store in `dir`, its producer snapshot there too, that needs a
    /// snapshot inside an atomic batch.
    fn snapshot_missing_after(dir: &std::path::Path, failed: Option<&str>) -> ApiError {
        let config = StreamConfig::default();
        let mut store = semaq_store::FileStore::open(semaq_store::FileStoreConfig::new(dir.join("msgs"))).unwrap();
        store.append("orders", None, b"one", 1).unwrap();
        let (mut dedup, mut producers) = (Dedup::default(), Producers::new(Some(dir)));
        let ingest = Ingest {
            config: &config,
            store: &mut store,
            dedup: &mut dedup,
            producers: &mut producers,
            schema: None,
            chain: None,
            interest: None,
            now: 1,
            window_ns: 0,
            deferred_deletes: None,
            quota: None,
            held: None,
            snapshot_failed: failed.map(str::to_owned),
            purged: false,
        };
        ingest.snapshot_missing()
    }

    #[test]
    fn a_snapshot_needed_inside_an_atomic_batch_is_refused_with_the_unlocked_failure_never_written_under_the_lock() {
        for failed in [Some("No space left on device"), None] {
            let dir = tempfile::tempdir().unwrap();
            let refused = snapshot_missing_after(dir.path(), failed);
            assert_eq!(refused.err_code, 10077);
            let reason = failed.unwrap_or("not written before the atomic batch");
            assert!(refused.description.contains(reason), "{}", refused.description);
            assert!(!dir.path().join(super::super::producers::SNAPSHOT_FILE).exists(), "nothing written in place");
        }
    }
}
