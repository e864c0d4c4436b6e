//! Every bound the broker enforces by default, in one place. Units come last in each name.
//! Options (flags and the config file) may override those marked "configurable".

use std::time::Duration;

/// Largest message, headers and payload together (configurable: `max_payload`).
pub const PAYLOAD_BYTES_MAX: usize = 1024 * 1024;
/// Longest protocol control line (configurable: `max_control_line`).
pub const CONTROL_LINE_BYTES_MAX: usize = 4096;
/// Bytes queued for one client before it is a slow consumer (configurable: `max_pending`).
pub const PENDING_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Concurrent client connections (configurable: `max_connections`).
pub const CONNECTIONS_MAX: usize = 64 * 1024;
/// Subscriptions one connection may hold (configurable: `max_subscriptions`, 0 = this default).
pub const SUBSCRIPTIONS_PER_CONNECTION_MAX: usize = 1024 * 1024;
/// How often an idle client is pinged (configurable: `ping_interval`).
pub const PING_INTERVAL: Duration = Duration::from_secs(120);
/// Unanswered server pings before a client is closed as stale (configurable: `ping_max`).
pub const PINGS_OUTSTANDING_MAX: u32 = 2;
/// Time a client has to send CONNECT (configurable: `authorization.timeout`).
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(2);
/// Time a TLS handshake may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Time a single socket write may block before the client counts as slow (configurable: `write_deadline`).
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// Time shutdown waits for connections to flush what they have queued.
pub const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes read from a socket in one call.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Bytes written to a socket in one call; larger batches are split.
pub const WRITE_BATCH_BYTES_MAX: usize = 1024 * 1024;
/// Cached subject-match results in the router before the cache is trimmed.
pub const ROUTER_CACHE_ENTRIES_MAX: usize = 4096;
/// Connections listed by one `/connz` page.
pub const CONNZ_PAGE_ENTRIES_MAX: usize = 1024;
/// Time allowed to deliver the `-ERR 'Slow Consumer'` line to a client that is not reading.
pub const SLOW_CONSUMER_NOTICE_TIMEOUT: Duration = Duration::from_millis(250);
/// Messages queued for one stream's ingest task; a publish beyond this is refused (no responders).
pub const STREAM_INGEST_QUEUE_MESSAGES_MAX: usize = 64 * 1024;
/// Messages one ingest batch (one fsync) takes at most.
pub const STREAM_INGEST_BATCH_MESSAGES_MAX: usize = 1024;
/// `Nats-Msg-Id`s remembered per stream, however long the duplicate window.
pub const DEDUP_IDS_MAX: usize = 1024 * 1024;
/// Longest stream or consumer name.
pub const JETSTREAM_NAME_BYTES_MAX: usize = 255;
/// Streams per server.
pub const STREAMS_MAX: usize = 10_000;
/// Consumers per stream.
pub const CONSUMERS_PER_STREAM_MAX: usize = 10_000;
/// JetStream API requests queued before new ones are refused.
pub const JETSTREAM_API_QUEUE_REQUESTS_MAX: usize = 4096;
/// Names returned by one `STREAM.NAMES` / `CONSUMER.NAMES` page.
pub const API_LIST_NAMES_MAX: usize = 1024;
/// Infos returned by one `STREAM.LIST` / `CONSUMER.LIST` page.
pub const API_LIST_INFOS_MAX: usize = 256;
/// Messages scanned to count a filtered consumer's `num_pending`; the count is capped there.
pub const NUM_PENDING_SCAN_MESSAGES_MAX: usize = 100_000;
/// Interval at which durable consumers save changed state.
pub const CONSUMER_STATE_SAVE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// Push consumers: bytes delivered between flow-control requests.
pub const FLOW_CONTROL_BYTES: u64 = 1024 * 1024;
/// Messages one consumer pump delivers before yielding.
pub const PUMP_MESSAGES_MAX: usize = 1024;
/// Inactivity after which an ephemeral consumer without `inactive_threshold` is removed.
pub const EPHEMERAL_INACTIVE_THRESHOLD: std::time::Duration = std::time::Duration::from_secs(5);
/// Messages one pull request may ask for.
pub const PULL_BATCH_MESSAGES_MAX: u64 = 1_000_000;
/// Longest a consumer task sleeps without a reason to wake (it re-checks push interest).
pub const CONSUMER_IDLE_WAKE: std::time::Duration = std::time::Duration::from_millis(250);
/// Characters in a generated ephemeral consumer name.
pub const EPHEMERAL_NAME_CHARS: usize = 8;
/// How often streams with a max_age remove expired messages.
pub const STREAM_LIMITS_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);
/// Bytes queued for one stream's ingest task.
pub const STREAM_INGEST_QUEUE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Bytes of JetStream API requests queued.
pub const JETSTREAM_API_QUEUE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Subjects listed by one `STREAM.INFO` with `subjects_filter` (nats-server's JSMaxSubjectDetails).
pub const API_SUBJECT_DETAILS_MAX: usize = 100_000;
/// Nesting a schema or a validated payload may reach before it is refused (bounds recursion).
pub const SCHEMA_NESTING_DEPTH_MAX: usize = 64;
/// Longest schema text the registry accepts.
pub const REGISTRY_SCHEMA_BYTES_MAX: usize = 1024 * 1024;
/// Schemas (distinct global ids) the registry holds.
pub const REGISTRY_SCHEMAS_MAX: usize = 100_000;
/// Versions one subject may have, deleted ones included.
pub const REGISTRY_VERSIONS_PER_SUBJECT_MAX: usize = 10_000;
/// Longest subject name.
pub const REGISTRY_SUBJECT_NAME_BYTES_MAX: usize = 1024;
/// Schema API requests over NATS queued before new ones are refused.
pub const SCHEMA_API_QUEUE_REQUESTS_MAX: usize = 1024;
/// Bytes of schema API requests over NATS queued.
pub const SCHEMA_API_QUEUE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Messages (nested ones included) one Protobuf schema's compatibility check walks.
pub const REGISTRY_PROTO_MESSAGES_MAX: usize = 10_000;
/// Subjects the registry holds (deleted ones included, until hard-deleted).
pub const REGISTRY_SUBJECTS_MAX: usize = 100_000;
/// Schemas one registration may depend on through its references, transitively.
pub const REGISTRY_REFERENCES_MAX: usize = 1_000;
/// Schema pairs one compatibility check compares (combinators and references multiply them);
/// past it the check reports the schemas as too complex rather than compatible.
pub const SCHEMA_COMPATIBILITY_STEPS_MAX: usize = 100_000;
/// Array and map items one validated Avro binary datum may hold (zero-byte items cost no input).
pub const SCHEMA_DATUM_ITEMS_MAX: usize = 1 << 20;
/// Schemas one `GET /schemas` or `referencedby` answer lists (Confluent's schema.search.max.limit).
pub const REGISTRY_LIST_SCHEMAS_MAX: usize = 1_000;
/// Longest CEL filter expression accepted.
pub const FILTER_EXPRESSION_BYTES_MAX: usize = 4096;
/// Largest payload a filter parses; a larger one is a non-match (bounds the work per message).
pub const FILTER_PAYLOAD_BYTES_MAX: usize = 256 * 1024;
/// Filtered core subscriptions on one subject pattern (each message evaluates all of them).
pub const FILTERS_PER_SUBJECT_MAX: usize = 1024;
/// Filtered core subscriptions one connection may create.
pub const FILTERED_SUBSCRIPTIONS_PER_CONNECTION_MAX: usize = 1024;
/// Filtered core subscriptions per server.
pub const FILTERED_SUBSCRIPTIONS_MAX: usize = 64 * 1024;
/// Messages a filtered consumer skips in one look for its next match before yielding.
pub const FILTER_SKIP_MESSAGES_MAX: usize = 16 * 1024;
