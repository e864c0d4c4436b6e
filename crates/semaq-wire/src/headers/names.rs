//! Every header name clients see, spelled as SPEC §2 and nats-server write them (lookups ignore
//! case). Code that reads or writes a header names it from here, so a spelling lives in one place.

// JetStream publishing (nats-server's names).

/// Idempotency key for the stream's duplicate window.
pub const MSG_ID: &str = "Nats-Msg-Id";
/// The stream the publisher expects to store the message.
pub const EXPECTED_STREAM: &str = "Nats-Expected-Stream";
/// The stream's last sequence the publisher expects.
pub const EXPECTED_LAST_SEQUENCE: &str = "Nats-Expected-Last-Sequence";
/// The last sequence on the message's subject the publisher expects.
pub const EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";
/// The last message id the publisher expects.
pub const EXPECTED_LAST_MSG_ID: &str = "Nats-Expected-Last-Msg-Id";
/// Names the atomic batch a message belongs to.
pub const BATCH_ID: &str = "Nats-Batch-Id";
/// The message's position in its atomic batch, from 1.
pub const BATCH_SEQUENCE: &str = "Nats-Batch-Sequence";
/// On a batch's last message: `1` (commit with it) or `eob` (commit without it).
pub const BATCH_COMMIT: &str = "Nats-Batch-Commit";
/// Where a traced message's trace events go.
pub const TRACE_DEST: &str = "Nats-Trace-Dest";

// JetStream delivery and direct get (written by the server, nats-server's names).

/// Direct get: the stream the message is stored in.
pub const STREAM: &str = "Nats-Stream";
/// Direct get: the subject the message was stored under.
pub const SUBJECT: &str = "Nats-Subject";
/// Direct get: the message's stream sequence.
pub const SEQUENCE: &str = "Nats-Sequence";
/// Direct get: when the message was stored (RFC 3339).
pub const TIME_STAMP: &str = "Nats-Time-Stamp";
/// Headers-only delivery: the size of the payload left out.
pub const MSG_SIZE: &str = "Nats-Msg-Size";
/// Idle heartbeat: the last consumer sequence delivered.
pub const LAST_CONSUMER: &str = "Nats-Last-Consumer";
/// Idle heartbeat: the last stream sequence delivered.
pub const LAST_STREAM: &str = "Nats-Last-Stream";
/// Idle heartbeat of a push consumer stalled on flow control: the request's reply subject.
pub const CONSUMER_STALLED: &str = "Nats-Consumer-Stalled";
/// Pull status: messages the request may still receive.
pub const PENDING_MESSAGES: &str = "Nats-Pending-Messages";
/// Pull status: bytes the request may still receive.
pub const PENDING_BYTES: &str = "Nats-Pending-Bytes";
/// The pinned client's id on deliveries of a `pinned_client` consumer (nats-server 2.11).
pub const PIN_ID: &str = "Nats-Pin-Id";
/// A counter stream's increment (nats-server 2.12).
pub const INCR: &str = "Nats-Incr";

// SemaQ's AI context (SPEC §2).

/// L3 idempotent producer's id (also recorded as lineage from L2 on).
pub const PRODUCER: &str = "Semaq-Producer";
/// L3 idempotent producer's sequence, strictly increasing from 1.
pub const PRODUCER_SEQ: &str = "Semaq-Producer-Seq";
/// Model id, e.g. `llama3-70b`.
pub const MODEL: &str = "Semaq-Model";
/// Intent name for agent routing.
pub const INTENT: &str = "Semaq-Intent";
/// A confidence in [0, 1].
pub const CONFIDENCE: &str = "Semaq-Confidence";
/// 0 real-time inference, 1 interactive (default), 2 batch, 3 offline training.
pub const PRIORITY: &str = "Semaq-Priority";
/// `true`: may be shed first under overload.
pub const LOSSY: &str = "Semaq-Lossy";
/// Conversation or session key, for affinity routing and context.
pub const SESSION: &str = "Semaq-Session";
/// Input token count.
pub const TOKENS_IN: &str = "Semaq-Tokens-In";
/// Output token count.
pub const TOKENS_OUT: &str = "Semaq-Tokens-Out";
/// Event time, RFC 3339 or integer unix nanoseconds; L4 requires it increasing per subject.
pub const EVENT_TIME: &str = "Semaq-Event-Time";
/// Comma-separated `STREAM:SEQ` (or `Nats-Msg-Id`) references of the messages this one came from.
pub const PARENT: &str = "Semaq-Parent";
/// Written by the broker: `Semaq-Parent` with `Nats-Msg-Id` references resolved to `STREAM:SEQ`.
pub const PARENT_RESOLVED: &str = "Semaq-Parent-Resolved";
/// W3C trace context.
pub const TRACEPARENT: &str = "traceparent";
/// W3C trace context, vendor part.
pub const TRACESTATE: &str = "tracestate";
/// An agent's reply status: `ok` (default), `error` or `retry`.
pub const STATUS: &str = "Semaq-Status";
/// Written by the broker on an intent delivery: the agent chosen.
pub const AGENT: &str = "Semaq-Agent";
/// Written by the broker: the cosine similarity of a semantic match.
pub const SIMILARITY: &str = "Semaq-Similarity";
/// Written by the broker: the intent an unknown intent was matched to.
pub const INTENT_MATCHED: &str = "Semaq-Intent-Matched";
/// Written by a transform: `passthrough` when the fallback copied the message.
pub const TRANSFORM: &str = "Semaq-Transform";

// L4 provenance (SPEC §5, written by the server only).

/// The chain hash of the message (hex).
pub const HASH: &str = "Semaq-Hash";
/// The chain hash of the message before it (hex).
pub const PREV_HASH: &str = "Semaq-Prev-Hash";
/// On delivery: the signed checkpoint covering the message, or `pending`.
pub const CHECKPOINT: &str = "Semaq-Checkpoint";

// Key-Value (nats-server's names).

/// `sub` or `all`: the message replaces the subject's (or the stream's) earlier messages.
pub const ROLLUP: &str = "Nats-Rollup";
/// Per-message TTL: a Go duration of at least 1s, whole seconds, or `never`.
pub const TTL: &str = "Nats-TTL";
/// Why the server wrote a delete marker (`MaxAge`).
pub const MARKER_REASON: &str = "Nats-Marker-Reason";
/// Direct get batches and republish: the previous sequence (of the batch, of the subject).
pub const LAST_SEQUENCE: &str = "Nats-Last-Sequence";
/// Direct get batches: messages left after this one.
pub const NUM_PENDING: &str = "Nats-Num-Pending";
/// Direct get multi-last: the sequence the answer is as of.
pub const UP_TO_SEQUENCE: &str = "Nats-UpTo-Sequence";
/// KV clients' operation marker: `DEL` or `PURGE`.
pub const KV_OPERATION: &str = "KV-Operation";
