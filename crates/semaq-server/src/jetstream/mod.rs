//! JetStream: durable streams and consumers behind nats-server's JSON API (`$JS.API.>`).
//!
//! - [`config`]: stream and consumer configuration as the API spells it.
//! - [`errors`]: the API's error codes.
//! - [`stream`]: capture, checks, group-committed appends and PubAcks.
//! - [`producers`]: L3 idempotent producers, their table and its snapshot file.
//! - [`counters`]: counter streams (`allow_msg_counter`, `Nats-Incr`).
//! - [`batch`]: atomic batch publish (`Nats-Batch-Id`): staging, commit, crash recovery.
//! - [`api`]: the request handlers.
//! - [`account`]: account info and the account's JetStream limits.
//! - [`per_account`]: a JetStream for every account that enables it, and their directories.
//! - [`lineage`]: L4 `Semaq-Parent` checks at publish and the `$SEMAQ.API.LINEAGE` graph.
//! - [`provenance`]: level 4 streams: event time, context headers, hash chain, checkpoints.
//! - [`schema`]: the `semaq.*` level keys, and L2 streams bound to a registry subject.
//! - [`sources`]: mirrors and sources: followers copying other streams, their config checks.
//! - [`kv`]: Key-Value at publish: rollups, per-message TTL, delete markers, republish.
//! - [`direct`]: `DIRECT.GET`: by sequence, subject, batches and multi-last.
//!
//! On disk, in the account's directory of streams (`jetstream/streams/` or
//! `jetstream/accounts/<account>/streams/` under the store directory, see [`per_account`]):
//! `<name>/stream.json` (config and creation time), `<name>/msgs/` (the `semaq-store` log) and,
//! for level 4, `<name>/provenance/` (key pair and checkpoints).

pub mod account;
pub mod api;
pub mod batch;
pub mod config;
pub mod consumer;
pub mod consumers;
pub mod counters;
pub mod cron;
pub mod direct;
pub mod errors;
pub mod failpoint;
pub mod intents;
pub mod kv;
pub mod lineage;
pub mod not_enabled;
pub mod per_account;
pub mod producers;
pub mod provenance;
pub mod remote;
pub mod schedules;
pub mod schema;
pub mod sources;
pub mod stream;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use semaq_store::{DiscardPolicy, FileStore, FileStoreConfig, MemoryStore, StoreLimits, StreamStore};
use semaq_wire::{clock, subject};
use serde::{Deserialize, Serialize};

use self::account::JetStreamAccount;
use self::config::{Discard, Retention, Storage, StreamConfig};
use self::errors::ApiError;
use self::per_account::JetStreams;
use self::stream::Stream;
use crate::bus::Bus;
use crate::filter::Filters;
use crate::limits;
use crate::options::{Options, SyncPolicy};
use crate::registry::Registry;
use crate::sync;

/// What streams and consumers use outside JetStream: the narrow handles, never the whole server.
/// Each account's JetStream has its own, alike but for the bus.
#[derive(Debug, Clone)]
pub struct Services {
    /// Where streams capture their subjects and acks, API replies and deliveries are published:
    /// the bus as seen from the JetStream's account.
    pub bus: Arc<Bus>,
    /// Schemas that L2+ streams validate against.
    pub registry: Arc<Registry>,
    /// The payload cache and counters filtered consumers share.
    pub filters: Arc<Filters>,
    /// Effective options (store directory, sync policy, domain, account limits).
    pub options: Arc<Options>,
    /// This server's id, for events.
    pub server_id: String,
    /// The agent network, told which streams back durable intents.
    pub agents: Arc<crate::agents::Agents>,
    /// Token load, counted from payload fields a stream names (`semaq.tokens_in_field`, ...).
    pub tokens: Arc<crate::tokens::Tokens>,
    /// End-to-end latency, recorded at each first delivery.
    pub latency: Arc<crate::latency::Latency>,
}

/// What is persisted beside a stream's messages.
#[derive(Debug, Serialize, Deserialize)]
struct StreamMeta {
    config: StreamConfig,
    created: String,
    created_unix_ns: i64,
}

/// The streams of one account.
pub struct JetStream {
    /// The account, with its limits.
    account: JetStreamAccount,
    /// Every account's JetStream (weak: they hold this one), for the server's own bounds.
    peers: Weak<JetStreams>,
    dir: PathBuf,
    streams: RwLock<BTreeMap<String, Arc<Stream>>>,
    sync_policy: SyncPolicy,
    services: Arc<Services>,
    /// This JetStream, handed to its streams (lineage reads other streams).
    this: Weak<JetStream>,
    /// `$JS.API` requests answered since start (`/jsz` and account info `api.total`).
    pub api_requests: AtomicU64,
    /// Those answered with an error (`api.errors`).
    pub api_errors: AtomicU64,
    /// The followers of mirrors and sourcing streams.
    sources: sources::Followers,
}

impl std::fmt::Debug for JetStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStream").field("account", &self.account.name).field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// Why JetStream could not start.
#[derive(Debug, thiserror::Error)]
pub enum JetStreamError {
    /// The store directory could not be used.
    #[error("store directory {path}: {source}")]
    Directory {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// More accounts enable JetStream than the server allows.
    #[error("{count} accounts enable JetStream; at most {} may", limits::JETSTREAM_ACCOUNTS_MAX)]
    TooManyAccounts {
        /// How many do.
        count: usize,
    },
}

/// Maps a stream's config to the store's limits.
pub fn store_limits(config: &StreamConfig) -> StoreLimits {
    let positive = |value: i64| (value > 0).then_some(value as u64);
    StoreLimits {
        max_msgs: positive(config.max_msgs),
        max_bytes: positive(config.max_bytes),
        max_age: (config.max_age > 0).then(|| Duration::from_nanos(config.max_age as u64)),
        max_msgs_per_subject: positive(config.max_msgs_per_subject),
        max_msg_size: (config.max_msg_size > 0).then(|| config.max_msg_size.min(i64::from(u32::MAX)) as u32),
        discard: match config.discard {
            Discard::Old => DiscardPolicy::Old,
            Discard::New => DiscardPolicy::New,
        },
        discard_new_per_subject: config.discard_new_per_subject,
    }
}

/// Whether `name` is a valid stream or consumer name: no whitespace, `.`, `*`, `>` or path separators.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= limits::JETSTREAM_NAME_BYTES_MAX
        && !name.chars().any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
}

impl JetStream {
    /// Opens every stream of `account` found in `dir`, its directory of streams, and starts
    /// their tasks. `peers` will list it among every account's JetStream.
    pub fn start(
        services: Arc<Services>,
        account: JetStreamAccount,
        dir: PathBuf,
        peers: Weak<JetStreams>,
    ) -> Result<Arc<Self>, JetStreamError> {
        std::fs::create_dir_all(&dir)
            .map_err(|source| JetStreamError::Directory { path: dir.display().to_string(), source })?;
        let sync_policy =
            services.options.jetstream_sync.as_deref().and_then(SyncPolicy::parse).unwrap_or(SyncPolicy::Always);
        let jetstream = Arc::new_cyclic(|this| Self {
            account,
            peers,
            dir,
            streams: RwLock::new(BTreeMap::new()),
            sync_policy,
            services,
            this: this.clone(),
            api_requests: AtomicU64::new(0),
            api_errors: AtomicU64::new(0),
            sources: sources::Followers::default(),
        });
        jetstream.recover();
        jetstream.declare_durable_intents();
        Ok(jetstream)
    }

    /// The handles streams and consumers use.
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// The account this JetStream serves, with its limits.
    pub fn account(&self) -> &JetStreamAccount {
        &self.account
    }

    /// Every account's streams, this one's included: what the server's own bounds count.
    pub fn server_streams(&self) -> Vec<Arc<Stream>> {
        match self.peers.upgrade() {
            Some(peers) => peers.streams(),
            None => self.streams(),
        }
    }

    fn recover(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let meta_path = entry.path().join("stream.json");
            let meta =
                std::fs::read(&meta_path).ok().and_then(|bytes| serde_json::from_slice::<StreamMeta>(&bytes).ok());
            let Some(meta) = meta else {
                tracing::warn!("skipping {}: no readable stream.json", entry.path().display());
                continue;
            };
            if !self.account.has_stream_limits() {
                // nats-server restores no stream of an account whose tiers lack the stream's:
                // its files stay, for when the account's JWT has the tier again.
                let error = ApiError::no_limits();
                tracing::error!("Error recreating stream {:?}: {}", meta.config.name, error.description);
                continue;
            }
            let created = clock::system_time(meta.created_unix_ns);
            match self.open_stream(meta.config, created) {
                Ok(stream) => tracing::info!("  Restored stream {:?}: {} messages", stream.name, stream.state().msgs),
                Err(error) => tracing::error!("cannot restore stream in {}: {error}", entry.path().display()),
            }
        }
    }

    /// Tells the agent network which streams back durable intents now; only the home
    /// account's, where the agent network lives.
    fn declare_durable_intents(&self) {
        if self.account.name == self.services.options.home_account() {
            self.services.agents.set_durable(intents::declared(&self.streams()));
        }
    }

    fn stream_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn sync_policy_for(&self, config: &StreamConfig) -> SyncPolicy {
        if config.exactly_once() {
            // L3: an acknowledged publish is on disk, whatever the server's default.
            return SyncPolicy::Always;
        }
        config.metadata.get(config::SYNC_KEY).and_then(|text| SyncPolicy::parse(text)).unwrap_or(self.sync_policy)
    }

    fn open_stream(&self, config: StreamConfig, created: SystemTime) -> Result<Arc<Stream>, ApiError> {
        let mut store: Box<dyn StreamStore> = match config.storage {
            Storage::Memory => Box::new(MemoryStore::new(store_limits(&config))),
            Storage::File => {
                let mut store_config = FileStoreConfig::new(self.stream_dir(&config.name).join("msgs"));
                store_config.limits = store_limits(&config);
                if let Some(segment_bytes) = failpoint::segment_bytes() {
                    store_config.segment_size_bytes = segment_bytes;
                }
                let store = FileStore::open_on(store_config, stream_storage()).map_err(ApiError::stream_create)?;
                let report = store.recovery_report();
                if report.torn_bytes_truncated > 0 || report.indexes_rebuilt_count > 0 {
                    tracing::warn!(
                        "stream {:?}: recovery cut {} torn bytes and rebuilt {} indexes",
                        config.name,
                        report.torn_bytes_truncated,
                        report.indexes_rebuilt_count
                    );
                }
                if let Some(damage) = store.state().corruption {
                    tracing::error!("stream {:?}: stored data is damaged: {damage}", config.name);
                }
                Box::new(store)
            }
        };
        // A batch cut short by a crash goes before anything reads the stream (producers and the
        // L4 chain head included).
        batch::remove_incomplete_tail(store.as_mut());
        let sync_policy = self.sync_policy_for(&config);
        let dir = (config.storage == Storage::File).then(|| self.stream_dir(&config.name));
        let provenance = provenance::Provenance::open(&config, dir.as_deref(), store.as_ref())?;
        let owners = (self.services.clone(), self.this.clone());
        let stream = Stream::start(config, created, store, sync_policy, dir, owners, provenance);
        stream.capture();
        consumers::restore(&stream);
        stream.recheck_retention();
        self.write_streams().insert(stream.name.clone(), stream.clone());
        if let Some(this) = self.this.upgrade() {
            self.sources.follow(&this, &stream);
        }
        Ok(stream)
    }

    fn write_streams(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Stream>>> {
        sync::write(&self.streams)
    }

    /// A stream by name.
    pub fn stream(&self, name: &str) -> Option<Arc<Stream>> {
        sync::read(&self.streams).get(name).cloned()
    }

    /// All streams, by name.
    pub fn streams(&self) -> Vec<Arc<Stream>> {
        sync::read(&self.streams).values().cloned().collect()
    }

    fn persist_meta(&self, config: &StreamConfig, created: SystemTime) -> Result<(), ApiError> {
        if config.storage == Storage::Memory {
            return Ok(());
        }
        let dir = self.stream_dir(&config.name);
        std::fs::create_dir_all(&dir).map_err(ApiError::stream_create)?;
        let meta = StreamMeta {
            config: config.clone(),
            created: clock::rfc3339(created),
            created_unix_ns: clock::unix_nanos(created),
        };
        let bytes = serde_json::to_vec_pretty(&meta).map_err(ApiError::stream_create)?;
        write_atomically(&dir.join("stream.json"), &bytes).map_err(ApiError::stream_create)
    }

    /// Creates a stream, or succeeds when one with the identical config exists.
    pub fn create_stream(&self, config: StreamConfig) -> Result<Arc<Stream>, ApiError> {
        let config = normalize(config)?;
        account::check_stream_config(&self.account.limits, &config)?;
        self::schema::check_stream(&self.services.registry, &config.metadata)?;
        provenance::check_config(None, &config)?;
        if let Some(existing) = self.stream(&config.name) {
            return if *existing.config() == config { Ok(existing) } else { Err(ApiError::stream_name_exists()) };
        }
        account::check_stream_create(self, &config)?;
        if self.server_streams().len() >= limits::STREAMS_MAX {
            return Err(ApiError::max_streams());
        }
        self.check_overlap(&config)?;
        sources::check_against(self, &config)?;
        let durable = intents::durable_of(&config)?;
        let created = SystemTime::now();
        self.persist_meta(&config, created)?;
        let stream = self.open_stream(config, created)?;
        if let Some(durable) = durable {
            let dead_letters = intents::dead_letter_config(&stream.config(), &durable);
            if self.stream(&dead_letters.name).is_none() {
                if let Err(error) = self.create_stream(dead_letters) {
                    tracing::warn!(stream = %stream.name, %error, "the durable intent's dead-letter stream was not created");
                }
            }
            self.declare_durable_intents();
        }
        Ok(stream)
    }

    /// Updates a stream where nats-server allows it.
    pub fn update_stream(&self, config: StreamConfig) -> Result<Arc<Stream>, ApiError> {
        let config = normalize(config)?;
        account::check_stream_config(&self.account.limits, &config)?;
        self::schema::check_stream(&self.services.registry, &config.metadata)?;
        let stream = self.stream(&config.name).ok_or_else(ApiError::stream_not_found)?;
        if !self.account.has_stream_limits() {
            return Err(ApiError::no_limits());
        }
        check_update(&stream.config(), &config)?;
        sources::check_update(&stream.config(), &config)?;
        sources::check_against(self, &config)?;
        let follows_changed = sources::follows_changed(&stream.config(), &config);
        provenance::check_config(Some(&stream.config()), &config)?;
        self.check_overlap(&config)?;
        intents::durable_of(&config)?;
        self.persist_meta(&config, stream.created)?;
        stream.set_config(config)?;
        if let (true, Some(this)) = (follows_changed, self.this.upgrade()) {
            self.sources.follow(&this, &stream);
        }
        self.declare_durable_intents();
        Ok(stream)
    }

    fn check_overlap(&self, config: &StreamConfig) -> Result<(), ApiError> {
        for other in self.streams() {
            if other.name == config.name {
                continue;
            }
            let other_config = other.config();
            let other_subjects = &other_config.subjects;
            let overlaps = config.subjects.iter().any(|a| other_subjects.iter().any(|b| subject::overlaps(a, b)));
            if overlaps {
                return Err(ApiError::subjects_overlap());
            }
        }
        Ok(())
    }

    /// Deletes a stream and its data.
    pub fn delete_stream(&self, name: &str) -> Result<(), ApiError> {
        let stream = self.write_streams().remove(name).ok_or_else(ApiError::stream_not_found)?;
        self.sources.stop(name);
        stream.stop();
        let dir = self.stream_dir(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(ApiError::storage)?;
        }
        self.declare_durable_intents();
        Ok(())
    }

    /// Stops every stream, syncing what it stored.
    pub fn shutdown(&self) {
        self.sources.stop_all();
        for stream in self.streams() {
            stream.stop();
        }
    }

    /// Streams and total stored bytes, for account info.
    pub fn usage(&self) -> (usize, u64, u64) {
        let streams = self.streams();
        let (mut memory, mut storage) = (0, 0);
        for stream in &streams {
            let bytes = stream.state().bytes;
            match stream.config().storage {
                Storage::Memory => memory += bytes,
                Storage::File => storage += bytes,
            }
        }
        (streams.len(), memory, storage)
    }
}

/// Replaces `path` with `bytes` so a crash leaves the old or the new file, never a mix, and
/// the new one survives power loss once this returns (the store's I/O seam: temporary file,
/// fsync, rename, directory fsync).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    semaq_store::storage::write_atomic(&semaq_store::StdDisk, path, bytes, 0)
}

/// Fills defaults and checks a stream config the way nats-server does.
pub fn normalize(mut config: StreamConfig) -> Result<StreamConfig, ApiError> {
    if !is_valid_name(&config.name) {
        return Err(ApiError::invalid_stream_config("invalid stream name"));
    }
    sources::check_shape(&config)?;
    let follows = config.mirror.is_some() || !config.sources.is_empty();
    if config.subjects.is_empty() && !follows {
        config.subjects = vec![config.name.clone()];
    }
    for filter in &config.subjects {
        if !subject::is_valid_filter(filter) {
            return Err(ApiError::invalid_stream_config("invalid subject"));
        }
        if subject::overlaps(filter, "$JS.API.>") || subject::overlaps(filter, "$SEMAQ.API.>") {
            return Err(ApiError::invalid_stream_config("subjects that overlap with jetstream api are not allowed"));
        }
    }
    for (i, a) in config.subjects.iter().enumerate() {
        if let Some(b) = config.subjects[i + 1..].iter().find(|b| subject::overlaps(a, b)) {
            return Err(ApiError::invalid_stream_config(format!("subject {a:?} overlaps with {b:?}")));
        }
    }
    if config.num_replicas == 0 {
        config.num_replicas = 1;
    }
    if config.num_replicas > 1 {
        return Err(ApiError::replicas_not_supported());
    }
    // nats-server's checks and words, in its order.
    if config.max_age < 0 {
        return Err(ApiError::invalid_stream_config("max age can not be negative"));
    }
    if config.duplicate_window < 0 {
        return Err(ApiError::invalid_stream_config("duplicates window can not be negative"));
    }
    if config.num_replicas < 0 {
        return Err(ApiError::invalid_stream_config("negative values are not allowed"));
    }
    if config.duplicate_window == 0 && !follows {
        config.duplicate_window = config::DUPLICATE_WINDOW_DEFAULT_NS;
        if config.max_age > 0 && config.max_age < config.duplicate_window {
            config.duplicate_window = config.max_age;
        }
    }
    if config.max_age > 0 && config.duplicate_window > config.max_age {
        return Err(ApiError::invalid_stream_config("duplicates window can not be larger then max age"));
    }
    for value in
        [&mut config.max_msgs, &mut config.max_bytes, &mut config.max_msgs_per_subject, &mut config.max_consumers]
    {
        if *value == 0 {
            *value = -1;
        }
    }
    if config.max_msg_size == 0 {
        config.max_msg_size = -1;
    }
    if config.compression.is_empty() {
        config.compression = "none".into();
    }
    if config.compression != "none" {
        return Err(ApiError::invalid_stream_config("compression is not supported"));
    }
    if config.retention == Retention::Workqueue && config.discard_new_per_subject && config.discard != Discard::New {
        return Err(ApiError::invalid_stream_config("discard new per subject requires discard new policy to be set"));
    }
    if let Some(sync) = config.metadata.get(config::SYNC_KEY) {
        if SyncPolicy::parse(sync).is_none() {
            return Err(ApiError::invalid_stream_config(format!(
                "semaq.sync must be always, never or an interval like 100ms, not {sync:?}"
            )));
        }
    }
    consumer::check_priority(&config.metadata).map_err(ApiError::invalid_stream_config)?;
    config.apply_exactly_once().map_err(ApiError::invalid_stream_config)?;
    counters::check_config(&config)?;
    schedules::check_config(&mut config)?;
    kv::normalize(&mut config)?;
    Ok(config)
}

/// Refuses the changes nats-server refuses on update.
fn check_update(old: &StreamConfig, new: &StreamConfig) -> Result<(), ApiError> {
    if old.storage != new.storage {
        return Err(ApiError::stream_update("storage type"));
    }
    if (old.retention == Retention::Workqueue) != (new.retention == Retention::Workqueue) {
        return Err(ApiError::stream_update("retention policy to/from workqueue"));
    }
    if old.sealed && !new.sealed {
        return Err(ApiError::stream_update("sealed setting"));
    }
    if old.deny_delete && !new.deny_delete {
        return Err(ApiError::stream_update("deny delete"));
    }
    if old.deny_purge && !new.deny_purge {
        return Err(ApiError::stream_update("deny purge"));
    }
    counters::check_update(old, new)?;
    schedules::check_update(old, new)?;
    kv::check_update(old, new)
}

/// The disk file streams' stores run on: the real one, or with the `disk-faults` failure
/// point the real one with fsync and write faults switched by its control file.
fn stream_storage() -> semaq_store::SharedStorage {
    match failpoint::get() {
        Some(failpoint::Failpoint::DiskFaults { control, .. }) => {
            semaq_store::storage::faults::FaultSwitch::shared(control.clone())
        }
        _ => semaq_store::StdDisk::shared(),
    }
}
