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

mod pipeline;
mod purge;
mod retention;
mod snapshot;
pub(in crate::jetstream) mod split;
use pipeline::Pipeline;

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
    /// written it with the store's lock let go (`stream/split.rs`); `None` where they are made
    /// at once, after a snapshot in place (inside an atomic batch's appends).
    pub(in crate::jetstream) held: Option<Vec<split::Held>>,
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
    /// producer snapshot when it may remove what that does not cover yet (see
    /// `Stream::purge_in_batch` for when it is durable).
    pub fn purge(&mut self, stream: &Stream, request: semaq_store::PurgeRequest) -> Result<(), ApiError> {
        if self.holds(u64::MAX, split::Removal::Purge(request.clone()))? {
            return Ok(());
        }
        stream.purge_in_batch(self.store, &request)?;
        Ok(())
    }

    /// L3: whether removing `seq` (`u64::MAX`: any) must wait for the producer snapshot and
    /// was held for the ingest task to make after writing it without the lock; where nothing
    /// is held (an atomic batch's appends) the snapshot is written here, in place.
    fn holds(&mut self, seq: u64, removal: split::Removal) -> Result<bool, ApiError> {
        if !self.config.exactly_once() || !self.producers.removal_needs_snapshot(seq) {
            return Ok(false);
        }
        if let Some(held) = self.held.as_mut() {
            held.push(split::Held { removal, ack: None });
            return Ok(true);
        }
        self.producers.write_snapshot(self.store, self.now).map_err(ApiError::storage)?;
        Ok(false)
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
            .and_then(|t| super::transform::Transform::new(&t.source, &t.destination).ok().flatten());
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

    /// Checks and appends a batch, then commits it, leaving its acks in `acks`. Pipelined
    /// (`commits`: the stream's pipeline), the commit is left to the caller when it needs an
    /// fsync or must wait behind acks waiting for one: returns the last sequence it must cover.
    fn store_batch(
        &self,
        batch: &mut Vec<Inbound>,
        (dedup, batches): (&mut Dedup, &mut Batches),
        acks: &mut Vec<PendingAck>,
        commits: Option<&Pipeline>,
    ) -> Option<u64> {
        let config = self.config();
        // L4 lineage, before the store lock: resolving a parent's Msg-Id reads other streams.
        let mut parents = super::lineage::Parents::check(self, &config, batch);
        let window_ns = self.duplicate_window_ns();
        // Before this stream's store lock: the quota reads the other streams' usage.
        let quota = self.jetstream().and_then(|jetstream| Quota::for_stream(&jetstream, self, config.storage));
        // L3: a snapshot the batch's appends could need, before the lock is taken for it.
        self.snapshot_before_batch(&config, batch, batches);
        let mut store = self.store();
        if !commits.is_some_and(Pipeline::busy) {
            self.take_drop_report(store.as_mut(), dedup);
        }
        let now = clock::unix_nanos_now();
        dedup.expire(now, window_ns);
        // Interest streams keep only what some consumer wants (nats-server's "no interest" skip).
        let interest: Option<Vec<Arc<super::config::ConsumerConfig>>> = (config.retention
            == super::config::Retention::Interest)
            .then(|| self.consumers().iter().map(|c| c.config()).collect());
        // L2: the bound schema version, resolved once per batch (None for unbound streams).
        let mut schema = super::schema::for_stream(&self.services, &config);
        let mut chain;
        let mut part = Part { quota, ..Part::default() };
        let mut messages = batch.drain(..).enumerate();
        // One round per part of the batch: an L3 snapshot splits it (`stream/split.rs`).
        loop {
            let mut producers = lock(&self.producers);
            if config.exactly_once() {
                // Also after an update raised the stream to L3.
                producers.ensure_loaded(store.as_mut(), now);
            }
            // L4: the hash chain, held for the part (lock order: store, then chain).
            chain = self.provenance.as_deref().map(|provenance| provenance.writer(&config));
            let mut ingest = Ingest {
                config: &config,
                store: store.as_mut(),
                dedup: &mut *dedup,
                producers: &mut producers,
                schema: schema.as_mut(),
                chain: chain.as_mut(),
                interest: interest.as_deref(),
                now,
                window_ns,
                deferred_deletes: None,
                quota: part.quota.take(),
                held: Some(Vec::new()),
            };
            let split = self.store_part(&mut ingest, &mut messages, (&mut parents, &mut *batches), acks, &mut part);
            part.quota = ingest.quota.take();
            let held = ingest.held.take().unwrap_or_default();
            drop(ingest);
            drop(producers);
            if !split {
                break;
            }
            // The chain goes with the store (lock order); taken again for the next part.
            drop(chain);
            if std::mem::take(&mut part.commit_first) {
                store = self.commit_before_roll(store);
                part.committed = true;
                // Split before an append, nothing was removed since the last part.
                if held.is_empty() {
                    continue;
                }
            }
            store = self.make_held(store, held, acks);
        }
        let Part { stored_any, must_sync, traced, .. } = part;
        let mut written_ok = true;
        // Acks behind a commit in flight wait for it, duplicates' and refusals' too (a
        // duplicate may name a sequence whose fsync is still running).
        let deferred = commits.is_some_and(|commits| commits.acks_waiting() || (stored_any && must_sync));
        if deferred {
            traced.written(None::<&StoreError>);
        } else if stored_any {
            // An ack promises at least "handed to the OS": with `sync: always`, "on disk".
            let written = match self.sync_policy {
                SyncPolicy::Always if must_sync => {
                    // L4: the chain comes after the store in the lock order, so its writer is let
                    // go with the store and taken again after (nothing else appends to the chain;
                    // the ticker meanwhile writes only checkpoints up to `committed_seq`).
                    let chained = chain.take().is_some();
                    let (synced, relocked) = self.commit(store);
                    store = relocked;
                    if chained {
                        chain = self.provenance.as_deref().map(|provenance| provenance.writer(&config));
                    }
                    synced
                }
                SyncPolicy::Always | SyncPolicy::Interval(_) | SyncPolicy::Never => store.flush(),
            };
            written_ok = written.is_ok();
            traced.written(written.as_ref().err());
            if let Err(error) = written {
                let out_of_space = matches!(error, StoreError::OutOfSpace(_));
                if out_of_space {
                    // The store undid the batch: what was derived from it (msg-ids, L3 producer
                    // sequences, the L4 chain head) goes back too.
                    *dedup = Dedup::default();
                    lock(&self.producers).unload();
                    if let Some(chain) = chain.as_mut() {
                        chain.reload(store.as_ref());
                    }
                    tracing::error!(stream = %self.name, %error, "disk full; refusing the batch's acks");
                } else {
                    tracing::error!(stream = %self.name, %error, "critical write error; refusing the batch's acks");
                }
                let refusal = store_error(error);
                for (_, outcome, _) in acks.iter_mut() {
                    if outcome.is_ok() {
                        *outcome = Err(refusal.clone());
                    }
                }
                batches.refuse_commits(&refusal);
            }
        }
        let state = store.state();
        if let Some(chain) = chain.as_mut() {
            // Deferred, nothing is durable yet; else the commit covered everything stored (L4
            // streams sync always).
            let durable_seq = if deferred { self.committed_seq() } else { state.last_seq };
            chain.finish_batch(written_ok, durable_seq);
        }
        drop(chain);
        self.stored_bytes.store(state.bytes, std::sync::atomic::Ordering::Relaxed);
        let last_seq = state.last_seq;
        if written_ok && !deferred {
            self.committed_seq.store(last_seq, std::sync::atomic::Ordering::Release);
        }
        drop(store);
        if let Some(schema) = schema.as_mut() {
            schema.announce();
        }
        if stored_any && !deferred {
            self.last_seq.send_replace(last_seq);
        }
        deferred.then_some(last_seq)
    }

    /// Stores the batch's messages until the end, or until an L3 producer snapshot is needed
    /// (`stream/split.rs`): before an append it must precede (the message is kept in `part`
    /// to resume with), or after a message whose removal was held for it. Returns whether it
    /// stopped for a snapshot.
    fn store_part(
        &self,
        ingest: &mut Ingest<'_, '_>,
        messages: &mut impl Iterator<Item = (usize, Inbound)>,
        (parents, batches): (&mut super::lineage::Parents, &mut Batches),
        acks: &mut Vec<PendingAck>,
        part: &mut Part,
    ) -> bool {
        let config = ingest.config;
        loop {
            let (mut message, resumed) = match part.resume.take() {
                Some(Resume::Message(message)) => (message, true),
                Some(Resume::Commit(commit)) => {
                    if self.store_commit(ingest, commit, batches, acks, part) {
                        return true;
                    }
                    continue;
                }
                None => {
                    let Some((index, mut message)) = messages.next() else { return false };
                    self.ingest_budget.give_back(message.size());
                    // L4 lineage: what was decided before the store lock (a refusal, or the resolved parents).
                    if let Err(refused) = parents.apply(index, &mut message) {
                        acks.push((message.reply, Err(refused), None));
                        continue;
                    }
                    // Atomic batches are staged until their commit, then stored whole (batch.rs).
                    match batches.route(config, message, std::time::Instant::now()) {
                        Route::Single(message) => (message, false),
                        Route::Staged => continue,
                        Route::Refused(reply, error) => {
                            acks.push((reply, Err(error), None));
                            continue;
                        }
                        Route::Commit(commit) => {
                            if self.store_commit(ingest, commit, batches, acks, part) {
                                return true;
                            }
                            continue;
                        }
                    }
                }
            };
            let committed = std::mem::take(&mut part.committed);
            if !resumed || committed {
                if !committed && commit_before_append(ingest, &message) {
                    (part.resume, part.commit_first) = (Some(Resume::Message(message)), true);
                    return true;
                }
                if append_needs_snapshot(ingest, &message) {
                    part.resume = Some(Resume::Message(message));
                    return true;
                }
            }
            let outcome = self.ingest_one(ingest, &mut message, false);
            if let Some(carried) = message.trace.take() {
                part.traced.stored(carried, &self.name, &message.subject, &outcome);
            }
            let stored = matches!(outcome, Ok((_, false)));
            part.stored_any |= stored;
            part.must_sync |= stored && !defers_sync(config, &message.subject);
            // nats-server's PubAck of a counter stream carries the subject's new value.
            let counted = config.allow_msg_counter && stored;
            let value = counted.then(|| super::counters::value_of(&message.payload)).flatten();
            acks.push((message.reply, outcome, value));
            if let Some(held) = ingest.held.as_mut().filter(|held| !held.is_empty()) {
                let ack = acks.len() - 1;
                held.iter_mut().for_each(|held| _ = held.ack.get_or_insert(ack));
                return true;
            }
        }
    }

    /// Stores an atomic batch at its commit. Returns whether the part ends here: before the
    /// batch, for a commit aside (its rolls could otherwise complete a pending seal under the
    /// lock, and its appends cannot be split; it is resumed after), or after it, for a removal
    /// held for an L3 snapshot.
    fn store_commit(
        &self,
        ingest: &mut Ingest<'_, '_>,
        mut commit: batch::Commit,
        batches: &mut Batches,
        acks: &mut Vec<PendingAck>,
        part: &mut Part,
    ) -> bool {
        let committed = std::mem::take(&mut part.committed);
        if !committed && batch::commit_before(ingest, &commit) {
            (part.resume, part.commit_first) = (Some(Resume::Commit(commit)), true);
            return true;
        }
        let spanned: Vec<_> = (commit.messages.iter_mut())
            .filter_map(|m| m.trace.take().map(|carried| (carried, m.subject.clone())))
            .collect();
        let stored = batch::commit(self, ingest, commit, batches, acks);
        part.traced.committed(&self.name, spanned, stored);
        part.stored_any |= stored;
        part.must_sync |= stored;
        ingest.held.as_ref().is_some_and(|held| !held.is_empty())
    }

    /// Makes the store's changes durable with its lock let go for the fsyncs (the three steps
    /// of `semaq_store::commit`), so consumers, stream info and direct gets never wait for the
    /// disk; returns the outcome and the lock, taken again. Only the ingest task appends, so
    /// the ticket stays valid; whatever runs under the lock meanwhile syncs its own changes.
    fn commit<'s>(&'s self, store: StoreGuard<'s>) -> (semaq_store::StoreResult<()>, StoreGuard<'s>) {
        self.commit_as(store, false)
    }

    /// [`Stream::commit`] for work aside from ingest (a purge, a delete, retention's removals,
    /// a timer's sync): a full disk it meets, whose reload dropped appends the ingest task's
    /// commit still waits for, fails here and is reported to that commit, which refuses them
    /// (`StreamStore::sync_begin_aside`).
    pub(super) fn commit_aside<'s>(&'s self, store: StoreGuard<'s>) -> (semaq_store::StoreResult<()>, StoreGuard<'s>) {
        self.commit_as(store, true)
    }

    fn commit_as<'s>(
        &'s self,
        mut store: StoreGuard<'s>,
        aside: bool,
    ) -> (semaq_store::StoreResult<()>, StoreGuard<'s>) {
        let started = Instant::now();
        let latency = &self.services.bus.stats.store_sync_latency;
        let begun = if aside { store.sync_begin_aside() } else { store.sync_begin() };
        let ticket = match begun {
            Ok(ticket) => ticket,
            Err(error) => return (Err(error), store),
        };
        if ticket.is_empty() {
            latency.observe(started.elapsed());
            return (store.sync_finish(ticket.run()), store);
        }
        drop(store);
        super::failpoint::sync_delay();
        let synced = ticket.run();
        latency.observe(started.elapsed());
        let mut store = self.store();
        (store.sync_finish(synced), store)
    }

    /// Inside a batch, before an append that would roll into a full queue of pending seals: a
    /// commit aside completes them with the store's lock let go for its fsyncs, so the roll
    /// begins one more and fsyncs nothing (readers never wait for the disk). Aside, so that a
    /// full disk it meets is reported to the batch's own commit, which refuses what the reload
    /// dropped. A failure leaves the roll to complete the oldest seal in place, as before.
    fn commit_before_roll<'s>(&'s self, store: StoreGuard<'s>) -> StoreGuard<'s> {
        let (committed, store) = tokio::task::block_in_place(|| self.commit_aside(store));
        if let Err(error) = committed {
            tracing::error!(stream = %self.name, %error, "cannot complete the pending seals before a roll");
        }
        store
    }

    /// Before a batch, when nothing this task appended waits for a commit: takes the report of a
    /// full disk met aside (a delete's or a snapshot's commit) that no commit of its own took,
    /// so that changes resume; what was derived from appends goes, as after any full disk.
    fn take_drop_report(&self, store: &mut dyn StreamStore, dedup: &mut Dedup) {
        if let Err(error) = store.report_dropped() {
            *dedup = Dedup::default();
            lock(&self.producers).unload();
            tracing::error!(stream = %self.name, %error, "disk full; taking writes again");
        }
    }

    /// Checks and stores one message: the L2 schema (unless the caller checked it), the L3
    /// producer sequence, then [`store_one`] (dedup, expected headers, limits); an interest
    /// stream drops at once what no consumer wants. Atomic batches store each message here too.
    pub(super) fn ingest_one(
        &self,
        ingest: &mut Ingest<'_, '_>,
        message: &mut Inbound,
        schema_checked: bool,
    ) -> PublishOutcome {
        let exactly_once = ingest.config.exactly_once();
        // L3: read on the headers as sent (a handle to them: lineage below may replace them, but
        // only when there is no claim, so the claim stays true of what is stored).
        let sent_headers = message.headers.clone().filter(|_| exactly_once);
        let claim = producers::claim(sent_headers.as_deref())?;
        if !schema_checked && ingest.schema.as_deref().is_some_and(SchemaCheck::may_evolve) {
            // L4 context first: a message refused for it must not auto-evolve the schema.
            super::provenance::check_before_schema(ingest, message, claim)?;
        }
        if let Some(schema) = ingest.schema.as_deref_mut() {
            if !schema_checked {
                schema.check(&message.payload)?;
            }
            if claim.is_none() {
                // A claim already names the producer; otherwise L2 lineage records one.
                super::schema::record_producer(&self.services.bus.clients, message);
            }
        }
        if let Some(claim) = claim {
            if let Verdict::Duplicate { stream_seq } = ingest.producers.check(claim)? {
                return Ok((stream_seq, true));
            }
        }
        if exactly_once {
            self.before_append(ingest, message)?;
        }
        let (subject, headers) = (&message.subject, message.headers.as_deref());
        let sourced = message.is_sourced();
        let store = &*ingest.store;
        if let Some(counted) =
            super::counters::apply(ingest.config, store, subject, headers, &message.payload, sourced)?
        {
            message.payload = counted.payload;
            if let Some(headers) = counted.headers {
                message.headers = Some(headers);
            }
        }
        if !message.internal && !sourced {
            super::schedules::check_publish(ingest.config, &*ingest.store, message)?;
        }
        let kv = super::kv::check(ingest.config, ingest.store, message)?;
        let outcome = store_one(
            ingest.config,
            ingest.store,
            ingest.dedup,
            message,
            (ingest.now, ingest.window_ns),
            ingest.chain.as_deref_mut(),
            ingest.quota.as_ref(),
        )?;
        let (seq, false) = outcome else { return Ok(outcome) };
        kv.stored(self, ingest, message, seq)?;
        if ingest.config.allow_msg_schedules {
            self.schedule_stored(ingest, message, seq)?;
        }
        if let Some(fields) = crate::tokens::PayloadFields::from_metadata(&ingest.config.metadata) {
            let tokens = &self.services.tokens;
            tokens.record_payload(&fields, &message.subject, message.headers.as_deref(), &message.payload);
        }
        if ingest.config.level() >= 4 {
            self.msg_ids.record(message.headers.as_deref(), seq, ingest.now, ingest.window_ns);
        }
        if exactly_once {
            let model = ingest.store.size_model();
            let stored = model.message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
            ingest.producers.appended(stored);
            if let Some(claim) = claim {
                ingest.producers.record(claim, seq);
            }
        }
        if let Some(consumers) = ingest.interest {
            let wanted = consumers.iter().any(|c| super::consumer::validate::filter_matches(c, &message.subject));
            if !wanted {
                // The sequence is used and acknowledged, but nothing is kept.
                match &mut ingest.deferred_deletes {
                    Some(deferred) => deferred.push(seq),
                    None => ingest.drop_unwanted(seq)?,
                }
            }
        }
        Ok((seq, false))
    }

    /// Schedules: a stored schedule waits; a one-shot's stored copy removes its schedule.
    fn schedule_stored(&self, ingest: &mut Ingest<'_, '_>, message: &Inbound, seq: u64) -> Result<(), ApiError> {
        let purged = lock(&self.schedules).stored(message, seq, ingest.now);
        if let Some(scheduler) = purged {
            ingest.purge(self, super::schedules::schedule_purge(&scheduler))?;
        }
        Ok(())
    }

    /// Stores the copies of the schedules due now, through the same checks as any publish.
    fn fire_schedules(&self, dedup: &mut Dedup, batches: &mut Batches, acks: &mut Vec<PendingAck>) {
        if !self.config().allow_msg_schedules {
            return;
        }
        let mut fired = {
            let store = self.store();
            let mut table = lock(&self.schedules);
            table.ensure_loaded(&**store);
            table.fire(&**store, clock::unix_nanos_now())
        };
        // They count against the ingest queue's bytes like any publish (store_batch gives back).
        fired.retain(|m| self.ingest_budget.try_take(m.size()));
        if !fired.is_empty() {
            tokio::task::block_in_place(|| self.store_batch(&mut fired, (dedup, batches), acks, None));
            self.send_acks(acks);
        }
    }

    /// L3: before an append that the store's limits could answer by removing a message the
    /// producer snapshot does not cover yet, brings the snapshot up to date, in place. Only
    /// after the unlocked snapshot failed: elsewhere the batch was split before the message, or
    /// (an atomic batch) the snapshot written before its commit, without the lock
    /// (`stream/split.rs`, `snapshot_before_batch`), so it is fresh here.
    fn before_append(&self, ingest: &mut Ingest<'_, '_>, message: &Inbound) -> Result<(), ApiError> {
        let model = ingest.store.size_model();
        let stored = model.message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
        if ingest.producers.append_needs_snapshot(ingest.store.limits(), stored) {
            ingest
                .producers
                .write_snapshot(ingest.store, ingest.now)
                .map_err(|error| ApiError::storage(format!("cannot write the producer snapshot: {error}")))?;
        }
        Ok(())
    }

    fn send_acks(&self, acks: &mut Vec<PendingAck>) {
        let no_ack = self.config().no_ack;
        let domain = &self.services.options.jetstream_domain;
        let mut flush = FlushSet::default();
        let mut body = String::with_capacity(64);
        for (reply, outcome, value) in acks.drain(..) {
            match &outcome {
                Ok((_, false)) => bump(&self.publishes.stored),
                Ok((_, true)) => bump(&self.publishes.duplicates),
                Err(error) => self.publishes.refuse(error.refusal()),
            }
            let Some(reply) = reply else { continue };
            if no_ack && !reply.starts_with(super::sources::ACK_PREFIX) {
                continue;
            }
            body.clear();
            match (outcome, domain, value) {
                // The common case, written without building a JSON tree.
                (Ok((seq, false)), None, None) => {
                    let _ = write!(body, r#"{{"stream":"{}","seq":{seq}}}"#, self.name);
                }
                (outcome, domain, value) => {
                    let mut ack = pub_ack_json(&self.name, domain.as_deref(), outcome);
                    if let Some(value) = value {
                        ack["val"] = json!(value);
                    }
                    body.push_str(&ack.to_string());
                }
            }
            let message =
                Message { subject: &reply, reply: None, headers: None, payload: body.as_bytes(), publisher: None };
            self.services.bus.publish_batched(&reply, &message, &mut flush);
        }
        flush.flush();
        acks.clear();
    }
}

/// What the parts of one ingest batch share (see [`Stream::store_part`]).
#[derive(Default)]
struct Part {
    /// The account's and the server's byte limits, handed from part to part.
    quota: Option<Quota>,
    /// What to go on with: the split came before its appends.
    resume: Option<Resume>,
    /// The split is for a commit aside before `resume`'s appends (a roll would otherwise
    /// complete a pending seal under the lock; `StreamStore::commit_before_append(s)`).
    commit_first: bool,
    /// That commit was made: `resume` is appended without asking again.
    committed: bool,
    stored_any: bool,
    /// Whether something stored needs its own fsync before its ack (see `defers_sync`).
    must_sync: bool,
    traced: crate::trace::Stores,
}

/// What a part of a batch split before its appends goes on with.
enum Resume {
    /// A message on its own.
    Message(Inbound),
    /// An atomic batch, stored whole.
    Commit(batch::Commit),
}

/// Whether `message`'s append would roll into a full queue of pending seals, whose oldest the
/// store would then complete in place, its fsyncs under the lock (`Stream::commit_before_roll`).
fn commit_before_append(ingest: &Ingest<'_, '_>, message: &Inbound) -> bool {
    ingest.store.commit_before_append(&message.subject, message.headers.as_deref(), &message.payload)
}

/// L3: whether the store's limits could answer `message`'s append by removing a message the
/// producer snapshot does not cover yet (then the batch is split before it).
fn append_needs_snapshot(ingest: &Ingest<'_, '_>, message: &Inbound) -> bool {
    if !ingest.config.exactly_once() || ingest.held.is_none() {
        return false;
    }
    let model = ingest.store.size_model();
    let stored = model.message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
    ingest.producers.append_needs_snapshot(ingest.store.limits(), stored)
}

/// The stream's store, locked.
type StoreGuard<'s> = std::sync::MutexGuard<'s, Box<dyn StreamStore>>;

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

/// The PubAck body for one outcome.
pub fn pub_ack_json(stream: &str, domain: Option<&str>, outcome: PublishOutcome) -> Value {
    match outcome {
        Ok((seq, duplicate)) => {
            let mut ack = json!({ "stream": stream, "seq": seq });
            if duplicate {
                ack["duplicate"] = json!(true);
            }
            if let Some(domain) = domain {
                ack["domain"] = json!(domain);
            }
            ack
        }
        Err(error) => {
            let mut body = error.to_json("io.nats.jetstream.api.v1.pub_ack_response");
            body.as_object_mut().map(|o| o.remove("type"));
            // nats-server names the stream (and sequence 0) in a refused PubAck too.
            body["stream"] = json!(stream);
            body["seq"] = json!(0);
            body
        }
    }
}

/// Checks and stores one message (on L4 streams through `chain`, which checks and chains it).
fn store_one(
    config: &StreamConfig,
    store: &mut dyn StreamStore,
    dedup: &mut Dedup,
    message: &Inbound,
    (now, window_ns): (i64, i64),
    chain: Option<&mut super::provenance::ChainWriter<'_>>,
    quota: Option<&Quota>,
) -> PublishOutcome {
    if config.sealed {
        return Err(ApiError::sealed());
    }
    let size = message.headers.as_ref().map_or(0, Bytes::len) + message.payload.len();
    if config.max_msg_size >= 0 && size as i64 > config.max_msg_size {
        return Err(ApiError::message_too_large());
    }
    let found = message.headers.as_deref().map(|block| Headers::new(block).get_many(&EXPECTATION_HEADERS));
    let [msg_id, stream, last_seq, last_subject_seq, last_msg_id] = found.unwrap_or_default();
    if (msg_id.is_some() || last_msg_id.is_some()) && !dedup.loaded {
        *dedup = recover_dedup(store, window_ns);
        dedup.expire(now, window_ns);
    }
    let expected = Expected { stream, last_seq, last_subject_seq, last_msg_id };
    check_expectations(config, store, dedup, &expected, &message.subject)?;
    if let Some(id) = msg_id {
        if let Some(seq) = dedup.by_id.get(id) {
            return Ok((*seq, true));
        }
    }
    if let Some(quota) = quota {
        let bytes = store.size_model().message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
        quota.check(store.state().bytes, bytes)?;
    }
    let seq = match chain {
        Some(chain) => chain.append(store, message, now)?,
        None => {
            store.append(&message.subject, message.headers.as_deref(), &message.payload, now).map_err(store_error)?.0
        }
    };
    match msg_id {
        Some(id) => dedup.record(id, seq, now),
        // Every stored message sets the last id, empty when it has none (as nats-server).
        None => dedup.last_msg_id = None,
    }
    Ok((seq, false))
}

/// What `store_one` reads from a message's headers, in one pass: the id and the expectations.
const EXPECTATION_HEADERS: [&str; 5] = [
    header::MSG_ID,
    header::EXPECTED_STREAM,
    header::EXPECTED_LAST_SEQUENCE,
    header::EXPECTED_LAST_SUBJECT_SEQUENCE,
    header::EXPECTED_LAST_MSG_ID,
];

/// The `Nats-Expected-*` headers of one message.
struct Expected<'a> {
    stream: Option<&'a str>,
    last_seq: Option<&'a str>,
    last_subject_seq: Option<&'a str>,
    last_msg_id: Option<&'a str>,
}

fn check_expectations(
    config: &StreamConfig,
    store: &mut dyn StreamStore,
    dedup: &Dedup,
    expected: &Expected<'_>,
    subject: &str,
) -> Result<(), ApiError> {
    if let Some(expected) = expected.stream {
        if expected != config.name {
            return Err(ApiError::expected_stream_mismatch());
        }
    }
    if let Some(expected) = expected.last_seq {
        let last = store.state().last_seq;
        if expected.parse::<u64>().ok() != Some(last) {
            return Err(ApiError::wrong_last_sequence(last));
        }
    }
    if let Some(expected) = expected.last_subject_seq {
        let last = store.get_last_for_subject(subject).map_err(store_error)?.map_or(0, |m| m.seq);
        if expected.parse::<u64>().ok() != Some(last) {
            return Err(ApiError::wrong_last_sequence(last));
        }
    }
    if let Some(expected) = expected.last_msg_id {
        let last = dedup.last_msg_id.as_deref().unwrap_or("");
        if expected != last {
            return Err(ApiError::wrong_last_msg_id(last));
        }
    }
    Ok(())
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
    transform: Option<super::transform::Transform>,
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
}
