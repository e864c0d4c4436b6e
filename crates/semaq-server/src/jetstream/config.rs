//! Stream and consumer configuration as the JetStream JSON API spells it (nats-server 2.10
//! field names; durations in nanoseconds, `-1` for "unlimited").

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::limits;

fn minus_one() -> i64 {
    -1
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// How messages leave a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retention {
    /// Kept until a limit removes them.
    #[default]
    Limits,
    /// Kept while some consumer has not acknowledged them.
    Interest,
    /// Removed once acknowledged by the one consumer that took them.
    Workqueue,
}

/// What a full stream does with a new message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Discard {
    /// Remove the oldest.
    #[default]
    Old,
    /// Refuse the new one.
    New,
}

/// Where a stream keeps its messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// On disk, in the segmented log.
    #[default]
    File,
    /// In memory only.
    Memory,
}

/// A stream's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamConfig {
    /// Unique name.
    pub name: String,
    /// Free text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Subjects captured (wildcards allowed); none for mirrors (omitted then, as nats-server).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<String>,
    /// Retention policy.
    pub retention: Retention,
    /// Consumers allowed; -1 unlimited.
    pub max_consumers: i64,
    /// Messages kept; -1 unlimited.
    pub max_msgs: i64,
    /// Bytes kept; -1 unlimited.
    pub max_bytes: i64,
    /// Age in nanoseconds after which messages are removed; 0 unlimited.
    pub max_age: i64,
    /// Messages kept per subject; -1 unlimited.
    pub max_msgs_per_subject: i64,
    /// Largest message accepted; -1 unlimited.
    #[serde(default = "minus_one")]
    pub max_msg_size: i64,
    /// Discard policy when full.
    pub discard: Discard,
    /// Storage type.
    pub storage: Storage,
    /// Replicas (only 1 is supported).
    pub num_replicas: i64,
    /// Do not acknowledge publishes.
    #[serde(skip_serializing_if = "is_false")]
    pub no_ack: bool,
    /// Window in nanoseconds for `Nats-Msg-Id` deduplication.
    pub duplicate_window: i64,
    /// No more writes or deletes.
    pub sealed: bool,
    /// Refuse message deletes.
    pub deny_delete: bool,
    /// Refuse purges.
    pub deny_purge: bool,
    /// Allow `Nats-Rollup` headers.
    pub allow_rollup_hdrs: bool,
    /// Allow `$JS.API.DIRECT.GET`.
    pub allow_direct: bool,
    /// Direct get for mirrors.
    pub mirror_direct: bool,
    /// Discard new per subject.
    #[serde(skip_serializing_if = "is_false")]
    pub discard_new_per_subject: bool,
    /// Allow atomic batch publish (`Nats-Batch-Id`, nats-server 2.12); always on at level 3.
    #[serde(skip_serializing_if = "is_false")]
    pub allow_atomic: bool,
    /// Counter stream: messages carry `Nats-Incr` and the stream stores sums (nats-server 2.12).
    #[serde(skip_serializing_if = "is_false")]
    pub allow_msg_counter: bool,
    /// Compression ("none").
    pub compression: String,
    /// First sequence to use.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub first_seq: u64,
    /// Defaults for consumers.
    pub consumer_limits: serde_json::Value,
    /// Free-form metadata; SemaQ reads `semaq.*` keys (level, schema, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The stream this one mirrors (`sources.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror: Option<StreamSource>,
    /// The streams this one sources from (`sources.rs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<StreamSource>,
    /// Rewrites the subjects of captured messages before they are stored (`transform.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_transform: Option<SubjectTransformConfig>,
    /// Honour `Nats-TTL` headers (nats-server 2.11).
    #[serde(skip_serializing_if = "is_false")]
    pub allow_msg_ttl: bool,
    /// Nanoseconds a delete marker left when a subject's last message ages out lives; 0 none (2.11).
    #[serde(skip_serializing_if = "is_zero")]
    pub subject_delete_marker_ttl: i64,
    /// Republish stored messages to another subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub republish: Option<RePublish>,
    /// Honour `Nats-Schedule` headers: scheduled and delayed messages (nats-server 2.12).
    #[serde(skip_serializing_if = "is_false")]
    pub allow_msg_schedules: bool,
}

/// `republish`: stored messages matching `src` are published again to `dest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RePublish {
    /// Which stored subjects (a filter; empty means `>`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub src: String,
    /// Where they go; `$1`-style and `{{wildcard(1)}}` tokens take the source's wildcards.
    pub dest: String,
    /// Send only the headers, with `Nats-Msg-Size`.
    #[serde(skip_serializing_if = "is_false")]
    pub headers_only: bool,
}

fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}

/// Default `duplicate_window`: two minutes, as nats-server.
pub const DUPLICATE_WINDOW_DEFAULT_NS: i64 = 120_000_000_000;

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            description: None,
            subjects: Vec::new(),
            retention: Retention::Limits,
            max_consumers: -1,
            max_msgs: -1,
            max_bytes: -1,
            max_age: 0,
            max_msgs_per_subject: -1,
            max_msg_size: -1,
            discard: Discard::Old,
            storage: Storage::File,
            num_replicas: 1,
            no_ack: false,
            duplicate_window: 0,
            sealed: false,
            deny_delete: false,
            deny_purge: false,
            allow_rollup_hdrs: false,
            allow_direct: false,
            mirror_direct: false,
            discard_new_per_subject: false,
            allow_atomic: false,
            allow_msg_counter: false,
            compression: "none".to_string(),
            first_seq: 0,
            consumer_limits: serde_json::json!({}),
            metadata: BTreeMap::new(),
            mirror: None,
            sources: Vec::new(),
            subject_transform: None,
            allow_msg_ttl: false,
            subject_delete_marker_ttl: 0,
            republish: None,
            allow_msg_schedules: false,
        }
    }
}

impl StreamConfig {
    /// The semantic level the metadata declares (`semaq.level`; absent or unreadable: 1, which
    /// stream create refuses before it gets here).
    pub fn level(&self) -> u8 {
        super::schema::level_of(&self.metadata).unwrap_or(1)
    }

    /// Whether the stream enforces L3 (exactly-once): idempotent producers, durable double acks.
    pub fn exactly_once(&self) -> bool {
        self.level() >= 3
    }

    /// How long an open atomic batch may sit idle (`semaq.batch_timeout`, else the default).
    pub fn batch_timeout(&self) -> Duration {
        self.metadata
            .get(BATCH_TIMEOUT_KEY)
            .and_then(|text| crate::options::parse_duration(text.trim()))
            .unwrap_or(limits::ATOMIC_BATCH_TIMEOUT)
    }

    /// Applies what level 3 implies and checks its settings (called by `normalize`): atomic batch
    /// publish is part of the L3 promise, so `allow_atomic` is switched on (visible in stream
    /// info, as nats-server would show it); an ack must mean "on disk", so `semaq.sync` may only
    /// be `always`; `semaq.batch_timeout` must be a duration up to the limit.
    pub fn apply_exactly_once(&mut self) -> Result<(), String> {
        if let Some(text) = self.metadata.get(BATCH_TIMEOUT_KEY) {
            let max = limits::ATOMIC_BATCH_TIMEOUT_MAX;
            match crate::options::parse_duration(text.trim()) {
                Some(timeout) if !timeout.is_zero() && timeout <= max => {}
                _ => {
                    return Err(format!(
                        "{BATCH_TIMEOUT_KEY} must be a duration like 500ms or 10s, at most {}s, not {text:?}",
                        max.as_secs()
                    ))
                }
            }
        }
        if !self.exactly_once() {
            return Ok(());
        }
        if self.metadata.get(SYNC_KEY).is_some_and(|sync| sync.trim() != "always") {
            return Err(format!("semaq.level 3 and above acknowledge only what is on disk: {SYNC_KEY} must be always"));
        }
        self.allow_atomic = true;
        Ok(())
    }
}

/// Stream metadata key: how long an open atomic batch may sit idle (`500ms`, `10s`).
pub const BATCH_TIMEOUT_KEY: &str = "semaq.batch_timeout";
/// Stream metadata key: when appended messages are fsynced (`always`, `never`, an interval).
pub const SYNC_KEY: &str = "semaq.sync";

/// Which message a new consumer starts at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliverPolicy {
    /// The first message.
    #[default]
    All,
    /// The last message.
    Last,
    /// Only messages stored after creation.
    New,
    /// `opt_start_seq`.
    ByStartSequence,
    /// `opt_start_time`.
    ByStartTime,
    /// The last message of each subject.
    LastPerSubject,
}

/// How deliveries are acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckPolicy {
    /// No acks; delivered means done.
    None,
    /// Acking one acks all before it.
    All,
    /// Each message acked on its own.
    #[default]
    Explicit,
}

/// How fast stored messages are replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayPolicy {
    /// As fast as possible.
    #[default]
    Instant,
    /// At the original pace (treated as instant).
    Original,
}

/// A consumer's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsumerConfig {
    /// Durable name (legacy field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durable_name: Option<String>,
    /// Name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Free text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where it starts.
    pub deliver_policy: DeliverPolicy,
    /// For `by_start_sequence`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opt_start_seq: Option<u64>,
    /// For `by_start_time` (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opt_start_time: Option<String>,
    /// Ack policy.
    pub ack_policy: AckPolicy,
    /// Nanoseconds before an unacknowledged delivery is redelivered.
    #[serde(skip_serializing_if = "is_zero")]
    pub ack_wait: i64,
    /// Deliveries per message; -1 unlimited.
    pub max_deliver: i64,
    /// Redelivery delays in nanoseconds, by delivery count.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backoff: Vec<i64>,
    /// One subject filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_subject: Option<String>,
    /// Several subject filters.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub filter_subjects: Vec<String>,
    /// Replay policy.
    pub replay_policy: ReplayPolicy,
    /// Bits per second limit (ignored).
    #[serde(skip_serializing_if = "is_zero")]
    pub rate_limit_bps: i64,
    /// Pull requests waiting at once.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_waiting: i64,
    /// Deliveries not yet acknowledged at once.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_ack_pending: i64,
    /// Push flow control.
    #[serde(skip_serializing_if = "is_false")]
    pub flow_control: bool,
    /// Push idle heartbeat, nanoseconds.
    #[serde(skip_serializing_if = "is_zero")]
    pub idle_heartbeat: i64,
    /// Deliver only headers.
    #[serde(skip_serializing_if = "is_false")]
    pub headers_only: bool,
    /// Largest pull batch.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_batch: i64,
    /// Longest pull expiry, nanoseconds.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_expires: i64,
    /// Largest pull max_bytes.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_bytes: i64,
    /// Nanoseconds of inactivity after which an ephemeral consumer is removed.
    #[serde(skip_serializing_if = "is_zero")]
    pub inactive_threshold: i64,
    /// Replicas.
    pub num_replicas: i64,
    /// Keep state in memory.
    #[serde(skip_serializing_if = "is_false")]
    pub mem_storage: bool,
    /// Push: where messages go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliver_subject: Option<String>,
    /// Push: queue group of the deliver subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliver_group: Option<String>,
    /// Free-form metadata; SemaQ reads `semaq.filter`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// No deliveries before this time (RFC 3339; nats-server 2.11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_until: Option<String>,
    /// Priority group names pull requests must name (nats-server 2.11).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub priority_groups: Vec<String>,
    /// How requests of a priority group share messages.
    #[serde(skip_serializing_if = "PriorityPolicy::is_none")]
    pub priority_policy: PriorityPolicy,
    /// Nanoseconds a pinned client keeps its pin without pulling (`pinned_client`).
    #[serde(skip_serializing_if = "is_zero")]
    pub priority_timeout: i64,
}

/// How pull requests of a priority group share a consumer's messages (nats-server 2.11).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PriorityPolicy {
    /// No priority groups.
    #[default]
    None,
    /// Requests with `min_pending`/`min_ack_pending` get messages only past those thresholds.
    Overflow,
    /// One client (the pinned one, by `Nats-Pin-Id`) gets the messages until it goes quiet.
    PinnedClient,
    /// Requests with a lower `priority` are served first.
    Prioritized,
}

impl PriorityPolicy {
    fn is_none(&self) -> bool {
        *self == PriorityPolicy::None
    }
}

/// Default pinned client timeout: two minutes, as nats-server.
pub const PRIORITY_TIMEOUT_DEFAULT_NS: i64 = 120_000_000_000;

/// Default `ack_wait`: 30 seconds, as nats-server.
pub const ACK_WAIT_DEFAULT_NS: i64 = 30_000_000_000;
/// Default `max_ack_pending`, as nats-server.
pub const MAX_ACK_PENDING_DEFAULT: i64 = 1000;
/// Default `max_waiting` for pull consumers, as nats-server.
pub const MAX_WAITING_DEFAULT: i64 = 512;

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            durable_name: None,
            name: None,
            description: None,
            deliver_policy: DeliverPolicy::All,
            opt_start_seq: None,
            opt_start_time: None,
            // nats-server's zero value: a config that names no ack policy acks nothing.
            ack_policy: AckPolicy::None,
            ack_wait: 0,
            max_deliver: -1,
            backoff: Vec::new(),
            filter_subject: None,
            filter_subjects: Vec::new(),
            replay_policy: ReplayPolicy::Instant,
            rate_limit_bps: 0,
            max_waiting: 0,
            max_ack_pending: 0,
            flow_control: false,
            idle_heartbeat: 0,
            headers_only: false,
            max_batch: 0,
            max_expires: 0,
            max_bytes: 0,
            inactive_threshold: 0,
            num_replicas: 0,
            mem_storage: false,
            deliver_subject: None,
            deliver_group: None,
            metadata: BTreeMap::new(),
            pause_until: None,
            priority_groups: Vec::new(),
            priority_policy: PriorityPolicy::None,
            priority_timeout: 0,
        }
    }
}

/// A subject transform as the API spells it (`src` → `dest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubjectTransformConfig {
    /// The filter a subject must match (empty: `>`).
    #[serde(rename = "src")]
    pub source: String,
    /// What a matching subject becomes.
    #[serde(rename = "dest")]
    pub destination: String,
}

/// Where a mirror or source reaches a stream outside this JetStream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExternalStream {
    /// The JetStream API prefix (`$JS.<domain>.API`).
    pub api: String,
    /// The delivery prefix.
    pub deliver: String,
}

/// One origin of a mirror or source, as nats-server's `StreamSource`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamSource {
    /// The origin stream.
    pub name: String,
    /// First origin sequence to copy.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub opt_start_seq: u64,
    /// Copy origin messages stored at or after this time (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opt_start_time: Option<String>,
    /// Copy only origin subjects matching this filter.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub filter_subject: String,
    /// Copy subjects matching any transform's `src`, rewritten to its `dest`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subject_transforms: Vec<SubjectTransformConfig>,
    /// The origin lives behind another API prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalStream>,
}
