//! JetStream API errors with nats-server's `code`, `err_code` and description (its errors.json),
//! so clients that switch on `err_code` behave the same against SemaQ.

use serde_json::{json, Value};

use crate::stats::Refusal;

/// One API error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{description} (code {code}, err_code {err_code})")]
pub struct ApiError {
    /// HTTP-like status.
    pub code: u16,
    /// nats-server's error number.
    pub err_code: u32,
    /// Human-readable text.
    pub description: String,
}

impl ApiError {
    fn new(code: u16, err_code: u32, description: impl Into<String>) -> Self {
        Self { code, err_code, description: description.into() }
    }

    /// Why a publish answered with this error was refused, as `/metrics` counts it.
    pub fn refusal(&self) -> Refusal {
        match self.err_code {
            10400 => Refusal::Schema,
            10441 | 10442 => Refusal::EventTime,
            10443 | 10444 => Refusal::Level,
            10450 => Refusal::Lineage,
            10054 => Refusal::Limits,
            // Limits with discard new, and store failures, share nats-server's 10077.
            10077 if self.description.starts_with("maximum ") => Refusal::Limits,
            10077 => Refusal::Storage,
            10201 => Refusal::Dedup,
            10060 | 10070 | 10071 | 10164 => Refusal::Expected,
            10430 | 10431 => Refusal::Producer,
            10174..=10210 => Refusal::Batch,
            10109 => Refusal::Sealed,
            _ => Refusal::Other,
        }
    }

    /// The JSON body `{"type": ..., "error": {...}}`.
    pub fn to_json(&self, response_type: &str) -> Value {
        json!({
            "type": response_type,
            "error": { "code": self.code, "err_code": self.err_code, "description": self.description },
        })
    }

    /// A message refused by an L2 stream's schema (SemaQ's own code: nats-server has none).
    pub fn schema_violation(reason: impl std::fmt::Display) -> Self {
        Self::new(400, 10400, format!("message does not match the stream's schema: {reason}"))
    }
    /// Level 4: a message without `Semaq-Event-Time` (SemaQ's own codes 10441-10447).
    pub fn event_time_missing() -> Self {
        Self::new(
            400,
            10441,
            "a level 4 stream requires a Semaq-Event-Time header (RFC 3339 or integer unix nanoseconds)",
        )
    }
    /// Level 4: a `Semaq-Event-Time` that is neither form.
    pub fn event_time_invalid(text: &str) -> Self {
        Self::new(400, 10441, format!("Semaq-Event-Time {text:?} is neither RFC 3339 nor integer unix nanoseconds"))
    }
    /// Level 4: an event time not after the subject's last accepted one.
    pub fn event_time_not_increasing(subject: &str, text: &str, last_ns: i64) -> Self {
        let last = semaq_wire::clock::rfc3339_nanos(last_ns);
        Self::new(
            400,
            10442,
            format!("Semaq-Event-Time {text} is not after the last accepted event time on subject {subject}: {last} ({last_ns} ns)"),
        )
    }
    /// Level 4: a required context header is missing.
    pub fn context_missing(name: &str, required: &[String]) -> Self {
        let list = required.join(", ");
        Self::new(
            400,
            10443,
            format!("this level 4 stream requires the header {name} (required: {list}; see metadata semaq.require)"),
        )
    }
    /// Level 4: a publisher set a header only the server writes.
    pub fn provenance_header_reserved(name: &str) -> Self {
        Self::new(400, 10444, format!("header {name} is written by the server on level 4 streams; do not publish it"))
    }
    /// Level 4: a header block that is not well-formed (`semaq_wire::Headers::check`).
    pub fn provenance_malformed_headers() -> Self {
        Self::new(
            400,
            10444,
            "the message's header block is malformed (it must be NATS/1.0, then Name: value lines, then a blank line)",
        )
    }
    /// Level 4: an operation that would remove messages from the middle of the chain.
    pub fn append_only(what: &str) -> Self {
        Self::new(
            400,
            10445,
            format!("{what} is not allowed on a level 4 stream: its hash chain must stay whole (remove from the head with limits or a purge without filter)"),
        )
    }
    /// Level 4: the stream's key or checkpoints cannot be used.
    pub fn provenance_unavailable(reason: impl std::fmt::Display) -> Self {
        Self::new(500, 10446, format!("provenance unavailable: {reason}"))
    }
    /// A provenance request on a stream below level 4.
    pub fn not_level_4(stream: &str, level: u8) -> Self {
        Self::new(400, 10447, format!("stream {stream} is level {level}: only level 4 streams have a provenance chain"))
    }
    /// A `semaq.filter` expression that does not compile, with its position and reason
    /// (SemaQ's own code: nats-server's 10084 means a pull consumer without acks on a workqueue).
    pub fn invalid_filter(error: &crate::filter::CompileError) -> Self {
        Self::new(400, 10448, format!("invalid semaq.filter: {error}"))
    }
    /// `bad request`.
    pub fn bad_request() -> Self {
        Self::new(400, 10003, "bad request")
    }
    /// `invalid JSON: {err}`.
    pub fn invalid_json(error: impl std::fmt::Display) -> Self {
        Self::new(400, 10025, format!("invalid JSON: {error}"))
    }
    /// `stream not found`.
    pub fn stream_not_found() -> Self {
        Self::new(404, 10059, "stream not found")
    }
    /// `consumer not found`.
    pub fn consumer_not_found() -> Self {
        Self::new(404, 10014, "consumer not found")
    }
    /// `no message found`.
    pub fn no_message_found() -> Self {
        Self::new(404, 10037, "no message found")
    }
    /// `stream name already in use with a different configuration`.
    pub fn stream_name_exists() -> Self {
        Self::new(400, 10058, "stream name already in use with a different configuration")
    }
    /// `subjects overlap with an existing stream`.
    pub fn subjects_overlap() -> Self {
        Self::new(400, 10065, "subjects overlap with an existing stream")
    }
    /// `stream name in subject does not match request`.
    pub fn stream_mismatch() -> Self {
        Self::new(400, 10056, "stream name in subject does not match request")
    }
    /// An invalid stream configuration, with the reason.
    pub fn invalid_stream_config(reason: impl std::fmt::Display) -> Self {
        Self::new(500, 10052, format!("{reason}"))
    }
    /// `stream create failed`, with the reason.
    pub fn stream_create(reason: impl std::fmt::Display) -> Self {
        Self::new(500, 10049, format!("{reason}"))
    }
    /// An update nats-server does not allow, with the reason.
    pub fn stream_update(reason: impl std::fmt::Display) -> Self {
        Self::new(500, 10052, format!("stream configuration update can not change {reason}"))
    }
    /// `replicas > 1 not supported in non-clustered mode`.
    pub fn replicas_not_supported() -> Self {
        Self::new(500, 10074, "replicas > 1 not supported in non-clustered mode")
    }
    /// `no JetStream default or applicable tiered limit present`: a tiered account without the
    /// tier a stream or consumer would be in.
    pub fn no_limits() -> Self {
        Self::new(400, 10120, "no JetStream default or applicable tiered limit present")
    }
    /// `expected stream does not match`.
    pub fn expected_stream_mismatch() -> Self {
        Self::new(400, 10060, "expected stream does not match")
    }
    /// `wrong last sequence: {seq}`.
    pub fn wrong_last_sequence(seq: u64) -> Self {
        Self::new(400, 10071, format!("wrong last sequence: {seq}"))
    }
    /// `wrong last msg ID: {id}`.
    pub fn wrong_last_msg_id(id: &str) -> Self {
        Self::new(400, 10070, format!("wrong last msg ID: {id}"))
    }
    /// `message size exceeds maximum allowed`.
    pub fn message_too_large() -> Self {
        Self::new(400, 10054, "message size exceeds maximum allowed")
    }
    /// `maximum messages exceeded` (discard new).
    pub fn max_messages() -> Self {
        Self::new(503, 10077, "maximum messages exceeded")
    }
    /// `maximum bytes exceeded` (discard new).
    pub fn max_bytes() -> Self {
        Self::new(503, 10077, "maximum bytes exceeded")
    }
    /// `maximum messages per subject exceeded` (discard new per subject).
    pub fn max_messages_per_subject() -> Self {
        Self::new(503, 10077, "maximum messages per subject exceeded")
    }
    /// `invalid operation on sealed stream`.
    pub fn sealed() -> Self {
        Self::new(400, 10109, "invalid operation on sealed stream")
    }
    /// The store failed, with the reason.
    pub fn storage(reason: impl std::fmt::Display) -> Self {
        Self::new(503, 10077, format!("{reason}"))
    }
    /// `insufficient storage resources available`.
    pub fn insufficient_resources() -> Self {
        Self::new(500, 10047, "insufficient storage resources available")
    }
    /// `JetStream not enabled`.
    pub fn not_enabled() -> Self {
        Self::new(503, 10076, "JetStream not enabled")
    }
    /// `maximum number of streams reached`.
    pub fn max_streams() -> Self {
        Self::new(400, 10027, "maximum number of streams reached")
    }
    /// `maximum consumers limit reached`.
    pub fn max_consumers() -> Self {
        Self::new(400, 10026, "maximum consumers limit reached")
    }
    /// `consumer already exists`.
    pub fn consumer_exists() -> Self {
        Self::new(400, 10148, "consumer already exists")
    }
    /// `consumer name already in use`.
    pub fn consumer_name_exists() -> Self {
        Self::new(400, 10013, "consumer name already in use")
    }
    /// A consumer could not be created, with the reason.
    pub fn consumer_create(reason: impl std::fmt::Display) -> Self {
        Self::new(500, 10012, format!("{reason}"))
    }
    /// `consumer name in subject does not match durable name in request`.
    pub fn durable_name_mismatch() -> Self {
        Self::new(400, 10017, "consumer name in subject does not match durable name in request")
    }
    /// `Consumer create request did not match filtered subject from create subject`.
    pub fn filter_subject_mismatch() -> Self {
        Self::new(400, 10131, "Consumer create request did not match filtered subject from create subject")
    }
    /// `durable name can not contain '.', '*', '>'`.
    pub fn bad_durable_name() -> Self {
        Self::new(400, 10103, "durable name can not contain '.', '*', '>'")
    }
    /// `consumer filter subject is not a valid subset of the interest subjects`.
    pub fn filter_not_subset() -> Self {
        Self::new(400, 10093, "consumer filter subject is not a valid subset of the interest subjects")
    }
    /// `consumer cannot have both FilterSubject and FilterSubjects specified`.
    pub fn duplicate_filter_subjects() -> Self {
        Self::new(400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified")
    }
    /// `consumer subject filters cannot overlap`.
    pub fn overlapping_filter_subjects() -> Self {
        Self::new(400, 10138, "consumer subject filters cannot overlap")
    }
    /// `consumer in push mode can not set max waiting`.
    pub fn push_max_waiting() -> Self {
        Self::new(400, 10080, "consumer in push mode can not set max waiting")
    }
    /// `consumer deliver subject has wildcards`.
    pub fn deliver_to_wildcards() -> Self {
        Self::new(400, 10079, "consumer deliver subject has wildcards")
    }
    /// `consumer idle heartbeat requires a push based consumer`.
    pub fn heartbeat_requires_push() -> Self {
        Self::new(400, 10088, "consumer idle heartbeat requires a push based consumer")
    }
    /// `consumer flow control requires a push based consumer`.
    pub fn flow_control_requires_push() -> Self {
        Self::new(400, 10089, "consumer flow control requires a push based consumer")
    }
    /// `consumer with flow control also needs heartbeats`.
    pub fn flow_control_needs_heartbeats() -> Self {
        Self::new(400, 10108, "consumer with flow control also needs heartbeats")
    }
    /// `max deliver is required to be > length of backoff values`.
    pub fn max_deliver_backoff() -> Self {
        Self::new(400, 10116, "max deliver is required to be > length of backoff values")
    }
    /// `workqueue stream requires explicit ack`.
    pub fn workqueue_requires_explicit_ack() -> Self {
        Self::new(400, 10098, "workqueue stream requires explicit ack")
    }
    /// `multiple non-filtered consumers not allowed on workqueue stream`.
    pub fn workqueue_multiple_unfiltered() -> Self {
        Self::new(400, 10099, "multiple non-filtered consumers not allowed on workqueue stream")
    }
    /// `filtered consumer not unique on workqueue stream`.
    pub fn workqueue_not_unique() -> Self {
        Self::new(400, 10100, "filtered consumer not unique on workqueue stream")
    }
    /// `consumer must be deliver all on workqueue stream`.
    pub fn workqueue_deliver_all() -> Self {
        Self::new(400, 10101, "consumer must be deliver all on workqueue stream")
    }
    /// `consumer requires ack policy for max ack pending`.
    pub fn max_ack_pending_requires_ack() -> Self {
        Self::new(400, 10082, "consumer requires ack policy for max ack pending")
    }
    /// `consumer max waiting needs to be positive`.
    pub fn max_waiting_negative() -> Self {
        Self::new(400, 10087, "consumer max waiting needs to be positive")
    }
    /// `consumer ack wait needs to be positive`.
    pub fn ack_wait_negative() -> Self {
        Self::new(400, 10183, "consumer ack wait needs to be positive")
    }
    /// `consumer backoff needs to be positive`.
    pub fn backoff_negative() -> Self {
        Self::new(400, 10184, "consumer backoff needs to be positive")
    }
    /// `consumer config required`.
    pub fn consumer_config_required() -> Self {
        Self::new(400, 10078, "consumer config required")
    }
    /// `consumer expected to be durable but a durable name was not set`.
    pub fn durable_name_not_set() -> Self {
        Self::new(400, 10018, "consumer expected to be durable but a durable name was not set")
    }
    /// `Consumer Durable and Name have to be equal if both are provided`.
    pub fn durable_and_name_mismatch() -> Self {
        Self::new(400, 10132, "Consumer Durable and Name have to be equal if both are provided")
    }
    /// A deliver policy and its start options disagree (nats-server's wording in `reason`).
    pub fn invalid_policy(reason: impl std::fmt::Display) -> Self {
        Self::new(400, 10094, format!("{reason}"))
    }
    /// `consumer in pull mode requires explicit ack policy on workqueue stream`.
    pub fn pull_requires_ack_on_workqueue() -> Self {
        Self::new(400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream")
    }
    /// `consumer expected to be ephemeral but a durable name was set in request`.
    pub fn ephemeral_with_durable_name() -> Self {
        Self::new(400, 10020, "consumer expected to be ephemeral but a durable name was set in request")
    }
    /// `sequence {seq} not found`.
    pub fn sequence_not_found(seq: u64) -> Self {
        Self::new(400, 10043, format!("sequence {seq} not found"))
    }
    /// A message delete failed, with the reason.
    pub fn message_delete_failed(reason: impl std::fmt::Display) -> Self {
        Self::new(500, 10057, format!("{reason}"))
    }
    /// `atomic publish is disabled`: a `Nats-Batch-Id` on a stream without `allow_atomic`.
    pub fn atomic_publish_disabled() -> Self {
        Self::new(400, 10174, "atomic publish is disabled")
    }
    /// `atomic publish sequence is missing` (or not a number).
    pub fn atomic_publish_missing_seq() -> Self {
        Self::new(400, 10175, "atomic publish sequence is missing")
    }
    /// `atomic publish batch is incomplete`: a gap, an unknown or abandoned batch.
    pub fn atomic_publish_incomplete() -> Self {
        Self::new(400, 10176, "atomic publish batch is incomplete")
    }
    /// `atomic publish unsupported header used: {header}`.
    pub fn atomic_publish_unsupported_header(header: &str) -> Self {
        Self::new(400, 10177, format!("atomic publish unsupported header used: {header}"))
    }
    /// `atomic publish batch ID is invalid`.
    pub fn atomic_publish_invalid_id() -> Self {
        Self::new(400, 10179, "atomic publish batch ID is invalid")
    }
    /// `atomic publish batch is too large: {size}` (messages, as nats-server).
    pub fn atomic_publish_too_large(size: impl std::fmt::Display) -> Self {
        Self::new(400, 10199, format!("atomic publish batch is too large: {size}"))
    }
    /// `atomic publish batch commit is invalid`.
    pub fn atomic_publish_invalid_commit() -> Self {
        Self::new(400, 10200, "atomic publish batch commit is invalid")
    }
    /// `atomic publish batch contains duplicate message id`; `detail` names a duplicate producer
    /// sequence when that is what repeats (SemaQ's addition).
    pub fn atomic_publish_duplicate(detail: Option<String>) -> Self {
        let base = "atomic publish batch contains duplicate message id";
        Self::new(400, 10201, detail.map_or_else(|| base.to_string(), |detail| format!("{base}: {detail}")))
    }
    /// `atomic publish too many inflight`.
    pub fn atomic_publish_too_many_inflight() -> Self {
        Self::new(429, 10210, "atomic publish too many inflight")
    }
    /// `wrong last sequence`: an expected-sequence header a batch cannot honour (only its first
    /// message may expect the stream's last sequence).
    pub fn wrong_last_sequence_constant() -> Self {
        Self::new(400, 10164, "wrong last sequence")
    }
    /// Malformed L3 producer headers (SemaQ's own code: nats-server has none).
    pub fn invalid_producer(reason: impl std::fmt::Display) -> Self {
        Self::new(400, 10430, format!("invalid idempotent producer headers: {reason}"))
    }
    /// An L3 stream already remembers as many producers as it may (SemaQ's own code).
    pub fn too_many_producers(max: usize) -> Self {
        Self::new(400, 10431, format!("too many idempotent producers on this stream (at most {max})"))
    }
    /// `consumer does not exist` (an update of a missing consumer).
    pub fn consumer_does_not_exist() -> Self {
        Self::new(400, 10149, "consumer does not exist")
    }
    /// `consumer filter in FilterSubjects cannot be empty`.
    pub fn empty_filter() -> Self {
        Self::new(400, 10139, "consumer filter in FilterSubjects cannot be empty")
    }
    /// `Setting PriorityPolicy requires at least one PriorityGroup to be set`.
    pub fn priority_policy_without_group() -> Self {
        Self::new(400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set")
    }
    /// `Provided priority group does not exist for this consumer`.
    pub fn invalid_priority_group() -> Self {
        Self::new(400, 10160, "Provided priority group does not exist for this consumer")
    }
    /// `Group name cannot be an empty string`.
    pub fn empty_group_name() -> Self {
        Self::new(400, 10161, "Group name cannot be an empty string")
    }
    /// `Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters`.
    pub fn invalid_group_name() -> Self {
        Self::new(
            400,
            10162,
            "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
        )
    }
    /// `priority groups can not be used with push consumers`.
    pub fn push_with_priority_group() -> Self {
        Self::new(400, 10178, "priority groups can not be used with push consumers")
    }
    /// `consumer can not have priority groups when policy is none`.
    pub fn priority_group_with_policy_none() -> Self {
        Self::new(400, 10196, "consumer can not have priority groups when policy is none")
    }
    /// `PinnedTTL cannot be set when PriorityPolicy is none`.
    pub fn pinned_ttl_without_policy() -> Self {
        Self::new(400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none")
    }
    /// `message counters is disabled`.
    pub fn incr_disabled() -> Self {
        Self::new(400, 10168, "message counters is disabled")
    }
    /// `message counter increment is missing`.
    pub fn incr_missing() -> Self {
        Self::new(400, 10169, "message counter increment is missing")
    }
    /// `message counter has payload`.
    pub fn incr_payload() -> Self {
        Self::new(400, 10170, "message counter has payload")
    }
    /// `message counter increment is invalid`.
    pub fn incr_invalid() -> Self {
        Self::new(400, 10171, "message counter increment is invalid")
    }
    /// `message counter is broken`.
    pub fn counter_broken() -> Self {
        Self::new(400, 10172, "message counter is broken")
    }
    /// `consumer idle heartbeat needs to be >= 100ms`.
    pub fn small_heartbeat() -> Self {
        Self::new(400, 10083, "consumer idle heartbeat needs to be >= 100ms")
    }
    /// A `Nats-Rollup` the stream refuses (`rollup not permitted`, an unknown value).
    pub fn rollup_failed(reason: impl std::fmt::Display) -> Self {
        Self::new(500, 10111, format!("{reason}"))
    }
    /// A purge the stream refuses (`stream purge not permitted`).
    pub fn purge_failed(reason: impl std::fmt::Display) -> Self {
        Self::new(500, 10110, format!("{reason}"))
    }
    /// `per-message TTL is disabled`: a `Nats-TTL` on a stream without `allow_msg_ttl`.
    pub fn msg_ttl_disabled() -> Self {
        Self::new(400, 10166, "per-message TTL is disabled")
    }
    /// `invalid per-message TTL`: a `Nats-TTL` that is not a duration of at least 1s, seconds or `never`.
    pub fn msg_ttl_invalid() -> Self {
        Self::new(400, 10165, "invalid per-message TTL")
    }
}

/// Mirrors, sources and subject transforms (`sources.rs`, `transform.rs`): nats-server's codes.
impl ApiError {
    /// A mirror or source whose origin cannot be reached: remote origins (`external.api`) need a
    /// connection to another server (SemaQ's own code).
    pub fn stream_not_found_at(api: &str) -> Self {
        Self::new(
            503,
            10460,
            format!("stream source behind api prefix {api} is not reachable: remote origins are not supported"),
        )
    }
    /// `stream mirrors can not have first sequence configured`.
    pub fn mirror_with_first_seq() -> Self {
        Self::new(400, 10143, "stream mirrors can not have first sequence configured")
    }
    /// `stream mirrors can not contain subjects`.
    pub fn mirror_with_subjects() -> Self {
        Self::new(400, 10034, "stream mirrors can not contain subjects")
    }
    /// `stream mirrors can not also contain other sources`.
    pub fn mirror_with_sources() -> Self {
        Self::new(400, 10031, "stream mirrors can not also contain other sources")
    }
    /// `stream mirrors can not also use atomic publishing`.
    pub fn mirror_with_atomic_publish() -> Self {
        Self::new(400, 10198, "stream mirrors can not also use atomic publishing")
    }
    /// `mirrored stream name is invalid`.
    pub fn mirror_invalid_stream_name() -> Self {
        Self::new(400, 10142, "mirrored stream name is invalid")
    }
    /// `stream mirror configuration can not be updated`.
    pub fn mirror_not_updatable() -> Self {
        Self::new(400, 10055, "stream mirror configuration can not be updated")
    }
    /// `sourced stream name is invalid`.
    pub fn source_invalid_stream_name() -> Self {
        Self::new(400, 10141, "sourced stream name is invalid")
    }
    /// `duplicate source configuration detected`.
    pub fn source_duplicate() -> Self {
        Self::new(400, 10140, "duplicate source configuration detected")
    }
    /// A filter subject beside subject transforms.
    pub fn source_multiple_filters(mirror: bool) -> Self {
        if mirror {
            Self::new(400, 10150, "mirror with multiple subject transforms cannot also have a single subject filter")
        } else {
            Self::new(400, 10144, "source with multiple subject transforms cannot also have a single subject filter")
        }
    }
    /// A transform source that is not a subject.
    pub fn source_transform_source(mirror: bool, source: &str) -> Self {
        if mirror {
            Self::new(400, 10151, format!("mirror transform source: invalid subject {source}"))
        } else {
            Self::new(400, 10145, format!("source transform source: invalid subject {source}"))
        }
    }
    /// A transform destination that does not build.
    pub fn source_transform_destination(mirror: bool, error: &dyn std::fmt::Display) -> Self {
        if mirror {
            Self::new(400, 10154, format!("mirror transform: {error}"))
        } else {
            Self::new(400, 10146, format!("source transform: {error}"))
        }
    }
    /// Transform sources that overlap.
    pub fn source_overlapping_filters(mirror: bool) -> Self {
        if mirror {
            Self::new(400, 10152, "mirror subject filters can not overlap")
        } else {
            Self::new(400, 10147, "source filters can not overlap")
        }
    }
    /// A stream `subject_transform` source that is not a subject.
    pub fn stream_transform_source(source: &str) -> Self {
        Self::new(400, 10155, format!("stream transform source: invalid subject {source}"))
    }
    /// `stream external delivery prefix {prefix} must not contain wildcards`.
    pub fn external_deliver_wildcards(prefix: &str) -> Self {
        Self::new(400, 10024, format!("stream external delivery prefix {prefix} must not contain wildcards"))
    }
    /// `stream external api prefix {prefix} must not overlap with $JS.API`.
    pub fn external_api_overlap(prefix: &str) -> Self {
        Self::new(400, 10021, format!("stream external api prefix {prefix} must not overlap with $JS.API"))
    }
    /// A mirror or source whose `max_msg_size` is below its origin's.
    pub fn max_message_size_below_origin(mirror: bool) -> Self {
        if mirror {
            Self::new(400, 10030, "stream mirror must have max message size >= source")
        } else {
            Self::new(400, 10046, "stream source must have max message size >= target")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_refusals_map_to_their_metrics_reason() {
        let cases = [
            (ApiError::schema_violation("no"), Refusal::Schema),
            (ApiError::context_missing("traceparent", &["traceparent".into()]), Refusal::Level),
            (ApiError::provenance_header_reserved("Semaq-Hash"), Refusal::Level),
            (ApiError::event_time_missing(), Refusal::EventTime),
            (ApiError::event_time_not_increasing("s", "t", 1), Refusal::EventTime),
            (ApiError { code: 400, err_code: 10450, description: "invalid Semaq-Parent".into() }, Refusal::Lineage),
            (ApiError::max_messages(), Refusal::Limits),
            (ApiError::max_bytes(), Refusal::Limits),
            (ApiError::max_messages_per_subject(), Refusal::Limits),
            (ApiError::message_too_large(), Refusal::Limits),
            (ApiError::storage("disk full"), Refusal::Storage),
            (ApiError::atomic_publish_duplicate(None), Refusal::Dedup),
            (ApiError::wrong_last_sequence(3), Refusal::Expected),
            (ApiError::wrong_last_msg_id("x"), Refusal::Expected),
            (ApiError::expected_stream_mismatch(), Refusal::Expected),
            (ApiError::invalid_producer("bad"), Refusal::Producer),
            (ApiError::atomic_publish_incomplete(), Refusal::Batch),
            (ApiError::sealed(), Refusal::Sealed),
            (ApiError::bad_request(), Refusal::Other),
        ];
        for (error, reason) in cases {
            assert_eq!(error.refusal(), reason, "{error}");
        }
    }
}
