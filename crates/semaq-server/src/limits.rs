//! Every bound the broker enforces by default, in one place. Units come last in each name.
//! Options (flags and the config file) may override those marked "configurable". The schema
//! registry's own bounds are in [`semaq_registry::limits`].

use std::time::Duration;

/// Largest message, headers and payload together (configurable: `max_payload`).
pub const PAYLOAD_BYTES_MAX: usize = 1024 * 1024;
/// Longest protocol control line (configurable: `max_control_line`).
pub const CONTROL_LINE_BYTES_MAX: usize = 4096;
/// Bytes queued for one client before it is a slow consumer (configurable: `max_pending`).
pub const PENDING_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Share of `pending_bytes_max` past which a client's `Semaq-Lossy: true` deliveries are shed.
/// Half keeps the other half as headroom for the messages that must arrive, so a client that
/// falls behind loses its lossy traffic well before the rest could reach the slow-consumer
/// bound, while a burst of up to half the bound still sheds nothing.
pub const LOSSY_HIGH_WATER_PERCENT: usize = 50;
/// Subjects counted one by one in the server's shed counters (`/semaq/shed`); shed messages on
/// further subjects are counted together under [`SHED_OTHER_SUBJECTS_KEY`], so a publisher
/// inventing subjects cannot grow the map without bound.
pub const SHED_SUBJECTS_MAX: usize = 1024;
/// The key that counts shed messages on subjects beyond [`SHED_SUBJECTS_MAX`].
pub const SHED_OTHER_SUBJECTS_KEY: &str = "_other";
/// Subject prefixes counted one by one in `/metrics` (with `metrics { detail: true }`); traffic
/// on further prefixes is counted together under [`SUBJECT_PREFIX_OTHER_KEY`], so a publisher
/// inventing subjects cannot grow the series without bound.
pub const METRICS_SUBJECT_PREFIXES_MAX: usize = 256;
/// The prefix label that counts traffic on prefixes beyond [`METRICS_SUBJECT_PREFIXES_MAX`].
pub const SUBJECT_PREFIX_OTHER_KEY: &str = "_other";
/// Subject tokens that make a prefix in `/metrics` (configurable: `metrics.subject_depth`).
pub const METRICS_SUBJECT_DEPTH: usize = 1;
/// Deepest `metrics.subject_depth` accepted.
pub const METRICS_SUBJECT_DEPTH_MAX: usize = 16;
/// Upper bounds, in seconds, of the `/metrics` latency histograms' buckets (50 µs to 10 s).
pub const LATENCY_BUCKETS_SECONDS: &[f64] =
    &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];
/// Streams named one by one in `/metrics`; the rest are summed in the totals only.
pub const METRICS_STREAMS_MAX: usize = 1024;
/// Consumers named one by one in `/metrics` (with `metrics { detail: true }`), all streams together.
pub const METRICS_CONSUMERS_MAX: usize = 4096;
/// Accounts, streams or consumers listed by one `/jsz` page (nats-server's default `limit`).
pub const JSZ_PAGE_ENTRIES_MAX: usize = 1024;
/// Concurrent client connections (configurable: `max_connections`).
pub const CONNECTIONS_MAX: usize = 64 * 1024;
/// Cached publish-permission verdicts per connection before the cache is reset.
pub const PUBLISH_PERMISSION_CACHE_ENTRIES_MAX: usize = 1024;
/// Subscriptions one connection may hold (configurable: `max_subscriptions`, 0 = this default).
pub const SUBSCRIPTIONS_PER_CONNECTION_MAX: usize = 1024 * 1024;
/// How often an idle client is pinged (configurable: `ping_interval`).
pub const PING_INTERVAL: Duration = Duration::from_secs(120);
/// When the first keepalive PING goes after CONNECT at the latest (plus up to a fifth, random),
/// as nats-server's `firstClientPingInterval`: the round trip is measured early.
pub const FIRST_CLIENT_PING_INTERVAL: Duration = Duration::from_secs(2);
/// Unanswered server pings before a client is closed as stale (configurable: `ping_max`).
pub const PINGS_OUTSTANDING_MAX: u32 = 2;
/// Time a client has to send CONNECT (configurable: `authorization.timeout`).
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(2);
/// Time a TLS handshake may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// Names (alternative names, subject attributes) read from one client certificate for
/// `verify_and_map`: bounds the work a certificate with a huge subject can cause per connection.
pub const CERTIFICATE_NAMES_MAX: usize = 256;

/// Extra headers `websocket { headers { } }` may add to every upgrade response.
pub const WEBSOCKET_HEADERS_MAX: usize = 64;
/// Age of the last measured round trip after which a keepalive PING goes out even to an
/// active client (nats-server's `DEFAULT_RTT_MEASUREMENT_INTERVAL`).
pub const RTT_MEASUREMENT_INTERVAL: Duration = Duration::from_secs(3600);
/// Time a single socket write may block before the client counts as slow (configurable: `write_deadline`).
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// Time shutdown waits for connections to flush what they have queued.
pub const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes read from a socket in one call.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Bytes of one block of a client's outbound queue (a larger message gets a block of its own).
pub const OUTBOUND_BLOCK_BYTES: usize = 64 * 1024;
/// Capacity of the emptied outbound blocks a client keeps for reuse (beyond it, a burst's
/// blocks are let go once written).
pub const OUTBOUND_SPARE_BYTES_MAX: usize = 1024 * 1024;
/// Outbound blocks handed to the socket in one vectored write.
pub const WRITE_SLICES_MAX: usize = 64;
/// Cached subject-match results in the router before the cache is trimmed.
pub const ROUTER_CACHE_ENTRIES_MAX: usize = 4096;
/// Closed connections remembered for `/connz?state=closed`.
pub const CLOSED_CLIENTS_MAX: usize = 1000;
/// Subscriptions one account's `SUBSZ` answer says it lists (nats-server's default page).
pub const SUBSZ_PAGE_ENTRIES_MAX: usize = 1024;
/// Subscriptions of one account read to list a `SUBSZ` page, sorted by connection and sid.
pub const SUBSZ_SCAN_SUBSCRIPTIONS_MAX: usize = 100_000;
/// Subscriptions of one account read to answer `$SYS.REQ.ACCOUNT.NSUBS` or `$SYS.DEBUG.SUBSCRIBERS`.
pub const SUBSCRIBER_COUNT_SCAN_SUBSCRIPTIONS_MAX: usize = 100_000;
/// Connections listed by one `/connz` page.
pub const CONNZ_PAGE_ENTRIES_MAX: usize = 1024;
/// Time allowed to deliver the `-ERR 'Slow Consumer'` line to a client that is not reading.
pub const SLOW_CONSUMER_NOTICE_TIMEOUT: Duration = Duration::from_millis(250);
/// Finished spans waiting for OTLP export; past it a span is dropped and counted.
pub const TRACE_EXPORT_QUEUE_SPANS_MAX: usize = 4096;
/// Spans in one OTLP export request.
pub const TRACE_EXPORT_BATCH_SPANS_MAX: usize = 512;
/// How long the exporter gathers spans after the first before it posts them.
pub const TRACE_EXPORT_DELAY: Duration = Duration::from_millis(200);
/// How long one OTLP export may take (OTEL_EXPORTER_OTLP_TIMEOUT's default).
pub const TRACE_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages queued for one stream's ingest task; a publish beyond this is refused (no responders).
pub const STREAM_INGEST_QUEUE_MESSAGES_MAX: usize = 64 * 1024;
/// Messages one ingest batch (one fsync) takes at most.
pub const STREAM_INGEST_BATCH_MESSAGES_MAX: usize = 1024;
/// `Nats-Msg-Id`s remembered per stream, however long the duplicate window.
pub const DEDUP_IDS_MAX: usize = 1024 * 1024;
/// Longest stream or consumer name.
pub const JETSTREAM_NAME_BYTES_MAX: usize = 255;
/// Streams per server, every account's together.
pub const STREAMS_MAX: usize = 10_000;
/// Consumers per stream.
pub const CONSUMERS_PER_STREAM_MAX: usize = 10_000;
/// JetStream API requests queued before new ones are refused.
pub const JETSTREAM_API_QUEUE_REQUESTS_MAX: usize = 4096;
/// JetStream API requests that wait for an fsync (`STREAM.PURGE`, `STREAM.MSG.DELETE`) served
/// at once off the API task, so the requests behind them are not held up by the disk.
pub const JETSTREAM_API_FSYNCING_REQUESTS_MAX: usize = 8;
/// Names returned by one `STREAM.NAMES` / `CONSUMER.NAMES` page.
pub const API_LIST_NAMES_MAX: usize = 1024;
/// Infos returned by one `STREAM.LIST` / `CONSUMER.LIST` page.
pub const API_LIST_INFOS_MAX: usize = 256;
/// Messages scanned to count a filtered consumer's `num_pending`; the count is capped there.
pub const NUM_PENDING_SCAN_MESSAGES_MAX: usize = 100_000;
/// Interval at which durable consumers save changed state.
pub const CONSUMER_STATE_SAVE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// Push consumers with flow control: the most bytes delivered and not yet confirmed by a
/// flow-control response (nats-server's `JsFlowControlMaxPending`). The window starts at a
/// sixteenth of it and doubles with each response; a request goes out at half the window.
pub const FLOW_CONTROL_WINDOW_MAX_BYTES: u64 = 32 * 1024 * 1024;
/// Sequences scanned to count the messages left after a delivery on a literal filter subject
/// (the ack reply's pending count); past it the count is a lower bound.
pub const PENDING_SCAN_SEQS_MAX: u64 = 100_000;
/// Messages one consumer pump round delivers before yielding.
pub const PUMP_MESSAGES_MAX: usize = 1024;
/// Message bytes (headers and payloads) one consumer pump round delivers before yielding.
pub const PUMP_BYTES_MAX: usize = 1024 * 1024;
/// Messages a priority-ordered consumer reads ahead of its deliveries (`semaq.priority`): the
/// window within which lower `Semaq-Priority` numbers go first.
pub const PRIORITY_READ_AHEAD_MESSAGES_MAX: usize = 1024;
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
/// The auto-evolution rate bound, named here as well for the broker tests that hit it through a server.
pub use semaq_registry::limits::SCHEMA_EVOLUTIONS_PER_STREAM_PER_MINUTE_MAX;
/// Schema API requests over NATS queued before new ones are refused.
pub const SCHEMA_API_QUEUE_REQUESTS_MAX: usize = 1024;
/// Bytes of schema API requests over NATS queued.
pub const SCHEMA_API_QUEUE_BYTES_MAX: usize = 16 * 1024 * 1024;
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
/// `Semaq-Parent` references one message may carry.
pub const LINEAGE_PARENTS_PER_MESSAGE_MAX: usize = 64;
/// Longest single `Semaq-Parent` reference.
pub const LINEAGE_REFERENCE_BYTES_MAX: usize = 512;
/// `Nats-Msg-Id`s one L4 stream keeps to resolve `Semaq-Parent` ids (within its duplicate window).
pub const LINEAGE_MSG_IDS_PER_STREAM_MAX: usize = 100_000;
/// Bytes of the ids [`LINEAGE_MSG_IDS_PER_STREAM_MAX`] counts (each id is held twice).
pub const LINEAGE_MSG_IDS_BYTES_PER_STREAM_MAX: usize = 16 * 1024 * 1024;
/// Newest messages of a stream below L4 (which keeps no id map) searched to resolve a
/// `Nats-Msg-Id` parent (within the stream's duplicate window, like the dedup window itself).
pub const LINEAGE_MSG_ID_SCAN_MESSAGES_MAX: usize = 1024;
/// Streams searched to resolve one `Nats-Msg-Id` parent (the publishing stream first).
pub const LINEAGE_MSG_ID_SCAN_STREAMS_MAX: usize = 64;
/// Generations a lineage query walks up from its message (a request may ask for fewer).
pub const LINEAGE_DEPTH_MAX: usize = 64;
/// Nodes one lineage answer holds (a request may ask for fewer).
pub const LINEAGE_NODES_MAX: usize = 1000;
/// Lineage API requests queued before new ones are refused.
pub const LINEAGE_API_QUEUE_REQUESTS_MAX: usize = 256;
/// Level 4: messages chained between two checkpoints at most.
pub const PROVENANCE_CHECKPOINT_MESSAGES: u64 = 1000;
/// Level 4: longest a stored message waits for a checkpoint while messages arrive.
pub const PROVENANCE_CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);
/// Level 4: subjects whose last event time is cached (the rest are read back from the store).
pub const PROVENANCE_EVENT_TIMES_CACHED_MAX: usize = 64 * 1024;
/// Level 4, file streams: newest checkpoints held in memory (older ones are read from the file).
pub const PROVENANCE_CHECKPOINTS_CACHED_MAX: usize = 4096;
/// Level 4, memory streams: checkpoints kept (older ones are dropped).
pub const PROVENANCE_MEMORY_CHECKPOINTS_MAX: usize = 64 * 1024;
/// Checkpoints in one `$SEMAQ.API.STREAM.PROVENANCE` answer.
pub const PROVENANCE_API_CHECKPOINTS_MAX: usize = 1024;
/// Bytes of messages in one `$SEMAQ.API.STREAM.CHAIN` page (at least one message is sent).
pub const PROVENANCE_PAGE_BYTES_MAX: usize = 1024 * 1024;
/// Messages read under one hold of the store lock while a chain page is built.
pub const PROVENANCE_PAGE_LOCK_MESSAGES_MAX: usize = 256;
/// Provenance API requests queued before new ones are refused.
pub const PROVENANCE_API_QUEUE_REQUESTS_MAX: usize = 256;
/// Level 4: headers `semaq.require` may name (each is one bit of the ingest's one-pass scan).
pub const PROVENANCE_REQUIRED_HEADERS_MAX: usize = 16;
/// Level 4: the longest header name `semaq.require` accepts.
pub const PROVENANCE_REQUIRED_HEADER_NAME_BYTES_MAX: usize = 128;
/// Parsed stored payloads kept for the filtered consumers of the same messages.
pub const FILTER_CACHE_ENTRIES_MAX: usize = 1024;
/// Payload bytes of those entries (their parsed values take a few times as much).
pub const FILTER_CACHE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Largest payload kept there; larger ones are parsed by each consumer.
pub const FILTER_CACHE_PAYLOAD_BYTES_MAX: usize = 64 * 1024;
/// Compiled size of one filter's `matches()` regex (the regex crate's own default is 10 MiB).
pub const FILTER_REGEX_COMPILED_BYTES_MAX: usize = 256 * 1024;
/// Idempotent producers (`Semaq-Producer`) one L3 stream remembers; a new one beyond this is refused.
pub const PRODUCERS_PER_STREAM_MAX: usize = 10_000;
/// Recent sequences of each L3 producer whose stream sequence is kept, so a duplicate of one is
/// acked with its original's stream sequence (older ones name the producer's last message).
pub const PRODUCER_RECENT_SEQS_MAX: usize = 1024;
/// Those recent sequences of all producers of one stream together (bounds their memory, about
/// 40 bytes each, and the producer snapshot, a few bytes each).
pub const PRODUCER_RECENT_SEQS_PER_STREAM_MAX: usize = 64 * 1024;
/// Longest `Semaq-Producer` id on an L3 stream (bounds the producer table's memory).
pub const PRODUCER_ID_BYTES_MAX: usize = 256;
/// How often an L3 stream writes its producer snapshot when producers changed.
pub const PRODUCER_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(1);
/// Unlocked rounds of an L3 producer snapshot a removal outside ingest needs before it holds
/// the ingest task back for one last round (steady ingest can leave every round stale).
pub const PRODUCER_SNAPSHOT_ROUNDS_MAX: usize = 3;
/// Messages stored past an L3 stream's producer snapshot before it is rewritten even though no
/// producer changed: bounds what a restart re-reads to rebuild the producer table.
pub const PRODUCER_SNAPSHOT_LAG_MESSAGES_MAX: u64 = 100_000;
/// Messages in one atomic batch (nats-server's `max_batch_size` default).
pub const ATOMIC_BATCH_MESSAGES_MAX: usize = 1000;
/// Bytes (headers and payloads) one atomic batch may stage before its commit.
pub const ATOMIC_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Bytes the ingest may add to an atomic batch's message as it stores it (the commit marker,
/// a producer header), in the estimate of the segment rolls a batch could need.
pub const ATOMIC_BATCH_ADDED_BYTES_PER_MESSAGE_MAX: usize = 1024;
/// Atomic batches open at once on one stream (nats-server's per-stream inflight default).
pub const ATOMIC_BATCHES_PER_STREAM_MAX: usize = 50;
/// Atomic batches one connection may have open at once on one stream.
pub const ATOMIC_BATCHES_PER_CONNECTION_MAX: usize = 8;
/// Bytes of all open atomic batches staged by one stream.
pub const ATOMIC_BATCH_STAGED_BYTES_PER_STREAM_MAX: usize = 64 * 1024 * 1024;
/// Inactivity after which an open atomic batch is abandoned (nats-server's default; a stream may
/// lower or raise it with metadata `semaq.batch_timeout`, up to [`ATOMIC_BATCH_TIMEOUT_MAX`]).
pub const ATOMIC_BATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest `semaq.batch_timeout` a stream may set.
pub const ATOMIC_BATCH_TIMEOUT_MAX: Duration = Duration::from_secs(60);
/// Longest `Nats-Batch-Id` (as nats-server).
pub const ATOMIC_BATCH_ID_BYTES_MAX: usize = 64;
/// Stored messages stream start-up walks back to remove an uncommitted atomic batch tail.
pub const ATOMIC_BATCH_TAIL_SCAN_MESSAGES_MAX: u64 = ATOMIC_BATCH_MESSAGES_MAX as u64 + 1;
/// Double-ack confirmations one L3 consumer holds while its state is being saved; beyond this an
/// ack is applied but not confirmed (the client's double ack times out and it acks again).
pub const ACK_CONFIRMATIONS_PENDING_MAX: usize = 64 * 1024;

// The agent network (SPEC §6).

/// How often agents beat (configurable: `agents.heartbeat_interval`); SPEC §6 says at least every 2 s.
pub const AGENT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// Beats an agent may miss before it expires (configurable: `agents.heartbeats_missed_max`).
pub const AGENT_HEARTBEATS_MISSED_MAX: u32 = 3;
/// Longest a request waits for free capacity before its 503 (configurable: `agents.wait`).
pub const AGENT_WAIT: Duration = Duration::from_secs(5);
/// Longest a routed request may go unanswered (configurable: `agents.request_timeout`). LLM
/// calls take seconds; a minute leaves room for long generations.
pub const AGENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How often expiries, waits and timeouts are checked: the precision of all three.
pub const AGENT_SWEEP_INTERVAL: Duration = Duration::from_millis(50);
/// Live agents per server.
pub const AGENTS_MAX: usize = 10_000;
/// Requests in flight to one agent when its heartbeat names no capacity.
pub const AGENT_CAPACITY_DEFAULT: u32 = 16;
/// Largest capacity an agent may announce.
pub const AGENT_CAPACITY_MAX: u32 = 4096;
/// Longest agent id.
pub const AGENT_ID_BYTES_MAX: usize = 128;
/// Longest intent name.
pub const INTENT_NAME_BYTES_MAX: usize = 128;
/// Intents one agent may serve.
pub const INTENTS_PER_AGENT_MAX: usize = 64;
/// Longest agent inbox subject.
pub const AGENT_INBOX_BYTES_MAX: usize = 256;
/// Longest description of one intent.
pub const AGENT_DESCRIPTION_BYTES_MAX: usize = 1024;
/// Requests waiting for capacity, per intent; one more gets its 503 at once.
pub const AGENT_WAITING_MESSAGES_MAX: usize = 4096;
/// Bytes of requests waiting for capacity, all intents together.
pub const AGENT_WAITING_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Sessions remembered (to count moves and sessions held); the oldest are forgotten first.
pub const AGENT_SESSIONS_TRACKED_MAX: usize = 64 * 1024;
/// Agents one routed message is offered to before it counts as unroutable.
pub const AGENT_HANDOFF_TRIES_MAX: usize = 3;
/// Replies' outcomes queued for the agent table before a reply applies them itself.
pub const AGENT_LESSONS_QUEUED_MAX: usize = 4096;
/// Stored messages of one durable intent handed to agents and not yet settled.
pub const DURABLE_INTENT_PULL_MESSAGES_MAX: usize = 1024;
/// Durable intents: messages remembered per intent as declined by an agent (`retry`, `error`),
/// so their redelivery avoids it; the memory starts over when full.
pub const DURABLE_INTENT_DECLINED_MAX: usize = 4096;
/// How often a durable intent's dispatcher looks for stored work when nothing woke it.
pub const DURABLE_INTENT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Token load (`tokens.rs`): subject tokens that name a subject series (`ai.chat` of `ai.chat.x`).
pub const TOKEN_SUBJECT_DEPTH: usize = 2;
/// Token load: the largest token count one message may state; larger counts are refused.
pub const TOKENS_PER_MESSAGE_MAX: u64 = 100_000_000;
/// Token load: width of the fine buckets.
pub const TOKEN_FINE_BUCKET_SECONDS: u64 = 10;
/// Token load: fine buckets kept (an hour of 10 s).
pub const TOKEN_FINE_BUCKETS: usize = 360;
/// Token load: width of the coarse buckets.
pub const TOKEN_COARSE_BUCKET_SECONDS: u64 = 60;
/// Token load: coarse buckets kept (a day of 1 min).
pub const TOKEN_COARSE_BUCKETS: usize = 1440;
/// Token load: series per dimension (models, subjects, intents, agents) before `_other`.
pub const TOKEN_SERIES_PER_DIMENSION_MAX: usize = 128;

/// End-to-end latency (`latency.rs`): the default objective, publish to delivery (the seed's
/// P99 target); config `latency_objective`.
pub const LATENCY_OBJECTIVE: std::time::Duration = std::time::Duration::from_millis(15);
/// End-to-end latency: subject tokens that name a subject series.
pub const LATENCY_SUBJECT_DEPTH: usize = 2;
/// End-to-end latency: streams, and subject prefixes, with their own histograms before `_other`.
pub const LATENCY_KEYS_MAX: usize = 64;
/// End-to-end latency: the span of the "recent" histograms.
pub const LATENCY_RECENT_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Dashboard (`/api/streams`): streams listed, by name.
pub const DASHBOARD_STREAMS_MAX: usize = 256;
/// Dashboard (`/api/streams`): consumers listed per stream, by name.
pub const DASHBOARD_CONSUMERS_PER_STREAM_MAX: usize = 64;

/// Mirrors and sources (`jetstream/sources.rs`): copies handed to the sourcing stream before
/// their acks are awaited, per origin.
pub const SOURCE_INFLIGHT_MESSAGES_MAX: usize = 256;
/// Mirrors and sources: bytes of those copies (header blocks and payloads).
pub const SOURCE_INFLIGHT_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Mirrors and sources: the first wait after a failure (origin missing, copy refused).
pub const SOURCE_RETRY_BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(100);
/// Mirrors and sources: the longest wait between retries (doubling from the minimum).
pub const SOURCE_RETRY_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// Mirrors and sources: how long the acks of a batch of copies may take before the follower
/// reads its position back from the stream.
pub const SOURCE_ACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Mirrors and sources: how often an idle follower looks at its origin (keeps `active` fresh).
pub const SOURCE_IDLE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// Lame duck mode: the span over which connections are closed (nats-server's default).
pub const LAME_DUCK_DURATION: Duration = Duration::from_secs(120);
/// Lame duck mode: the wait before the first connection is closed (nats-server's default).
pub const LAME_DUCK_GRACE_PERIOD: Duration = Duration::from_secs(10);
/// Lame duck mode: the shortest `lame_duck_duration` accepted (nats-server's).
pub const LAME_DUCK_DURATION_MIN: Duration = Duration::from_secs(30);
/// Lame duck mode: the longest pause between two connections closed (nats-server's).
pub const LAME_DUCK_CLOSE_INTERVAL_MAX: Duration = Duration::from_secs(1);
/// Signals (SIGINT, SIGTERM, SIGUSR2) queued for the server before the next one waits.
pub const SIGNALS_QUEUED_MAX: usize = 4;
/// Auth (`auth/`): longest user JWT a client may send in CONNECT (the control line bounds it first
/// at its default of 4 KiB; this holds when `max_control_line` is raised).
pub const USER_JWT_BYTES_MAX: usize = 16 * 1024;
/// Auth: longest operator or account JWT read from the config (accounts with many exports are big).
pub const ACCOUNT_JWT_BYTES_MAX: usize = 1024 * 1024;
/// Auth: longest `description` or `info_url` of an account JWT or one of its exports (the jwt
/// library's `MaxInfoLength`; nats-server refuses an account over it).
pub const JWT_INFO_BYTES_MAX: usize = 8 * 1024;
/// Auth: longest nonce signature, as text (an Ed25519 signature is 86 base64url characters).
pub const NKEY_SIGNATURE_TEXT_BYTES_MAX: usize = 256;
/// Auth: subjects a scoped signing key's template may expand to, per permission list
/// (nats-server's `maxPermTemplateSubjectExpansions`); a user whose tags expand to more is refused.
pub const TEMPLATE_SUBJECTS_MAX: usize = 4096;
/// Auth: longest activation token an account JWT's import may carry.
pub const ACTIVATION_JWT_BYTES_MAX: usize = 16 * 1024;
/// Auth: accounts in `resolver_preload`.
pub const PRELOADED_ACCOUNTS_MAX: usize = 10_000;
/// Key-Value (`jetstream/kv.rs`): stored headers read per limits check while the per-message
/// TTL index is rebuilt after a restart.
pub const MSG_TTL_REBUILD_MESSAGES_PER_CHECK: usize = 10_000;
/// Key-Value: messages expired (TTL) or checked for a delete marker (max age) per limits check.
pub const MSG_TTL_EXPIRE_PER_CHECK: usize = 10_000;
/// Direct get: messages one multi-last request may answer (nats-server's 1024).
pub const DIRECT_GET_MULTI_LAST_MAX: usize = 1024;
/// Direct get: bytes a batch answers when the request sets no `max_bytes` (nats-server's
/// default max pending, 64 MiB).
pub const DIRECT_GET_BATCH_BYTES_DEFAULT: usize = 64 * 1024 * 1024;
/// Time from accepting a WebSocket socket to a finished upgrade, TLS included (configurable:
/// `websocket.handshake_timeout`; nats-server has none by default, SemaQ bounds it).
pub const WEBSOCKET_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of the HTTP upgrade request, request line and headers together; past it, 431.
pub const WEBSOCKET_REQUEST_BYTES_MAX: usize = 16 * 1024;
/// Header lines in the HTTP upgrade request; past it, 431.
pub const WEBSOCKET_REQUEST_HEADERS_MAX: usize = 64;
/// A WebSocket message may carry this many `max_payload`s (clients batch several ops per
/// frame), as in nats-server.
pub const WEBSOCKET_MESSAGE_PAYLOADS_MAX: usize = 8;
/// Largest WebSocket message (all its frames) whatever `max_payload` is, as in nats-server.
pub const WEBSOCKET_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Largest single frame the server writes; larger batches go out as several messages.
pub const WEBSOCKET_FRAME_BYTES_MAX: usize = 1024 * 1024;
/// Bytes read and dropped after refusing an upgrade, before the socket is closed regardless.
pub const WEBSOCKET_LINGER_BYTES_MAX: usize = 64 * 1024;
/// `name=value` pairs read from an upgrade request's `Cookie` headers; later pairs are ignored
/// (the request size bounds them too, but a browser may send many unrelated cookies).
pub const WEBSOCKET_COOKIES_MAX: usize = 256;

/// Subscriptions one connection holds before it first sweeps out the auto-unsubscribed ones
/// (then again each time the count doubles).
pub const SUBSCRIPTION_SWEEP_MIN: usize = 1024;

/// With permessage-deflate, outbound frames of at most this many bytes go uncompressed (as
/// nats-server: compressing a few bytes costs more than it saves).
pub const WEBSOCKET_COMPRESS_BYTES_MIN: usize = 64;
/// Control frames (pongs) queued for a client that pings faster than it reads; past it, pings
/// go unanswered until the queue drains.
pub const WEBSOCKET_QUEUED_CONTROL_BYTES_MAX: usize = 4 * 1024;

/// Schedules a stream reads back from its store after a restart (one per subject).
pub const SCHEDULES_PER_STREAM_MAX: usize = 100_000;
/// Scheduled messages a stream fires at one limits check; the rest wait for the next.
pub const SCHEDULES_FIRED_PER_CHECK_MAX: usize = 1_000;
/// How long a fired schedule whose copy the stream refused waits before it fires again.
pub const SCHEDULE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a remote mirror or source waits to connect to its origin's server.
pub const REMOTE_SOURCE_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a remote mirror or source waits for an answer of its origin's JetStream API.
pub const REMOTE_SOURCE_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Accounts (`bus.rs`): accounts in the config file's `accounts` block, each its own subject
/// space with its own router (JWT accounts are bounded by [`PRELOADED_ACCOUNTS_MAX`]).
pub const ACCOUNTS_MAX: usize = 10_000;
/// Accounts with a JetStream of their own (`jetstream/per_account.rs`). Each has its API task,
/// an API request queue of up to [`JETSTREAM_API_QUEUE_BYTES_MAX`] and a directory read at
/// start, so a config or resolver that enables more is refused at start.
pub const JETSTREAM_ACCOUNTS_MAX: usize = 1_000;
/// Exports and imports an account may list, each (config `exports`/`imports`, JWT claims).
pub const ACCOUNT_IMPORTS_MAX: usize = 1_000;
/// Subject mappings an account may have (config `mappings`, JWT claim): each publish tries
/// them in order, so they bound the work a publish does looking for its mapping.
pub const ACCOUNT_MAPPINGS_MAX: usize = 1_000;
/// Destinations one subject mapping may list (weights of 0 would otherwise allow any number).
pub const MAPPING_DESTINATIONS_MAX: usize = 100;
/// Imports one publish may cross from account to account (a stream import delivering into an
/// account that re-exports it, chained service imports); a loop the load-time cycle check
/// missed ends here.
pub const IMPORT_HOPS_MAX: usize = 8;
/// Steps of the load-time search for an import that closes a loop; a search that needs more
/// counts as a cycle.
pub const IMPORT_CYCLE_SEARCH_STEPS_MAX: usize = 10_000;
/// Service-import requests awaiting responses (their `_R_.` reply mappings), all accounts
/// together; past it the oldest half is dropped (their late responses go nowhere), so
/// responders that never answer cannot grow the table.
pub const SERVICE_RESPONSES_PENDING_MAX: usize = 20_000;
/// How long a service import's reply mapping waits for responses (nats-server's default
/// response threshold, 2 minutes) unless the export sets `response_threshold`; stream and
/// chunked responses keep it this long.
pub const SERVICE_RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// Service-import requests measured for latency tracking and awaiting their response; past it
/// further requests go unmeasured until responses or the response timeout free room.
pub const TRACKED_REQUESTS_MAX: usize = 10_000;
/// How often the timer looks for measured requests whose requester stopped listening (`408`, a
/// linear search of at most `TRACKED_REQUESTS_MAX`) without being woken: a client's unsubscribe,
/// auto-unsubscribe or disconnect wakes it at once, so this is a backstop. Deadlines (`504`)
/// wake it on time.
pub const TRACKED_RECHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// The least time between two searches for lost interest woken by unsubscribes, so a storm of
/// them costs one search per spacing; a `408` comes at most this late.
pub const TRACKED_INTEREST_CHECK_SPACING: std::time::Duration = std::time::Duration::from_millis(10);
/// `$SYS` server requests (`nats server ping`, ...) queued for the task that answers them;
/// past it further requests get no answer.
pub const SYSTEM_REQUESTS_QUEUED_MAX: usize = 256;
/// Longest CPU profile a `PROFILEZ` request may ask for (nats-server's bound, which SemaQ checks
/// before saying it has no CPU profile).
pub const PROFILEZ_CPU_DURATION_MAX: Duration = Duration::from_secs(15);
/// Wait before the first `$SYS.SERVER.<id>.STATSZ` heartbeat; each next wait doubles up to
/// [`STATSZ_HEARTBEAT_INTERVAL`] (nats-server's schedule).
pub const STATSZ_HEARTBEAT_FIRST: Duration = Duration::from_millis(250);
/// Interval of the `SERVER.CONNS` heartbeat of each account with connections (nats-server's
/// `eventsHBInterval`).
pub const ACCOUNT_CONNS_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// How often the accounts' `SERVER.CONNS` heartbeats are checked for being due: their precision.
pub const ACCOUNT_CONNS_HEARTBEAT_TICK: Duration = Duration::from_millis(500);
/// Longest wait between two `$SYS.SERVER.<id>.STATSZ` heartbeats (nats-server's `statsHBInterval`).
pub const STATSZ_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);
/// Steps of one cron pattern's search for its next time (cron.go's walk, field by field): five
/// years of the sparsest pattern take a few thousand.
pub const CRON_SEARCH_STEPS_MAX: u32 = 100_000;
/// How long a consumer info request waits for a pump round to hand its messages to the bus
/// (microseconds, unless the round's own delivery asked for the info).
pub const CONSUMER_INFO_HAND_OFF_WAIT: std::time::Duration = std::time::Duration::from_millis(5);
/// Publishes a `sync: always` stream appends while its one commit's fsync is in flight, to be
/// committed by the next fsync; past it (checked before each ingest batch) the ingest task
/// takes no more messages until the fsync ends.
pub const STREAM_COMMIT_WAITING_MESSAGES_MAX: usize = 4 * STREAM_INGEST_BATCH_MESSAGES_MAX;
/// Appends acknowledged before their fsync (an object's chunks) that a `sync: always` stream
/// lets pile up before it commits them aside, with no ack waiting: the fsync before the
/// object's meta message is acknowledged then has at most about this much left to write.
pub const STREAM_SYNC_AHEAD_BYTES: u64 = 8 * 1024 * 1024;
/// Sequences from a work queue's or interest stream's first that a start looks at for messages
/// its consumers had acknowledged but a crash kept (their removal was not yet synced).
pub const RETENTION_RECHECK_MESSAGES_MAX: u64 = 100_000;
/// Replies a user with response permissions may send to one request delivered to it
/// (configurable: `allow_responses.max`, a user JWT's `resp.max`; nats-server's default).
pub const RESPONSE_MSGS_MAX: u64 = 1;
/// How long after a request's delivery its reply is allowed (configurable:
/// `allow_responses.expires`, a user JWT's `resp.ttl`; nats-server's default).
pub const RESPONSE_EXPIRES: Duration = Duration::from_secs(120);
/// Reply subjects recorded for one connection's response permissions since the last prune
/// before the record is pruned of spent and expired entries (nats-server's `replyPermLimit`).
pub const REPLY_PERMITS_PRUNE_ADDED_MAX: usize = 4096;
/// Time after which the next recorded reply prunes the record (nats-server's `replyPruneTime`).
pub const REPLY_PERMITS_PRUNE_INTERVAL: Duration = Duration::from_secs(1);
/// Reply subjects one connection's record holds at most, pruned or not: nats-server has no such
/// bound, so a service that never answers long-lived requests grows it without end there. Past
/// it a delivered request's reply is not recorded, and answering it is refused.
pub const REPLY_PERMITS_MAX: usize = 64 * 1024;
