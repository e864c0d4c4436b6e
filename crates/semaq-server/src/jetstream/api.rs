//! The `$JS.API.>` request handlers: same subjects, JSON shapes and errors as nats-server.
//!
//! Requests arrive through an internal subscription, are queued (bounded) and handled one at
//! a time by the API task, which answers on the request's reply subject.

use std::sync::{Arc, Weak};

use base64::Engine;
use bytes::Bytes;
use semaq_wire::clock;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::config::StreamConfig;
use super::consumer::Consumer;
use super::consumers::{self, CreateRequest, CreateSubject};
use super::errors::ApiError;
use super::stream::{store_error, Stream};
use super::{JetStream, Services};
use crate::delivery::{InternalSink, Message};
use crate::limits;
use crate::stats::bump;
use crate::sync::ByteBudget;

/// The prefix of every JetStream API subject.
pub const API_PREFIX: &str = "$JS.API";

/// One API request.
#[derive(Debug)]
struct Request {
    subject: String,
    reply: Option<String>,
    payload: Bytes,
}

/// The internal subscription that queues API requests.
#[derive(Debug)]
struct ApiSink {
    queue: mpsc::Sender<Request>,
    budget: Arc<ByteBudget>,
}

impl InternalSink for ApiSink {
    fn receive(&self, message: &Message<'_>) -> bool {
        if !self.budget.try_take(message.payload.len()) {
            return false;
        }
        let request = Request {
            subject: message.subject.to_string(),
            reply: message.reply.map(str::to_string),
            payload: Bytes::copy_from_slice(message.payload),
        };
        if let Err(refused) = self.queue.try_send(request) {
            let request = match refused {
                mpsc::error::TrySendError::Full(request) | mpsc::error::TrySendError::Closed(request) => request,
            };
            self.budget.give_back(request.payload.len());
            return false;
        }
        true
    }
}

/// Subscribes to `$JS.API.>` and starts the task that answers.
pub fn start(jetstream: Arc<JetStream>) {
    let (queue, requests) = mpsc::channel(limits::JETSTREAM_API_QUEUE_REQUESTS_MAX);
    let budget = Arc::new(ByteBudget::new(limits::JETSTREAM_API_QUEUE_BYTES_MAX));
    let sink = Arc::new(ApiSink { queue, budget: budget.clone() });
    if let Err(error) = jetstream.services().bus.subscribe_internal(&format!("{API_PREFIX}.>"), None, sink) {
        tracing::error!(%error, "cannot subscribe to the JetStream API");
        return;
    }
    super::provenance::api::start(jetstream.clone());
    tokio::spawn(serve(Arc::downgrade(&jetstream), requests, budget));
}

async fn serve(jetstream: Weak<JetStream>, mut requests: mpsc::Receiver<Request>, budget: Arc<ByteBudget>) {
    let fsyncing = Arc::new(tokio::sync::Semaphore::new(limits::JETSTREAM_API_FSYNCING_REQUESTS_MAX));
    while let Some(request) = requests.recv().await {
        budget.give_back(request.payload.len());
        let Some(jetstream) = jetstream.upgrade() else { return };
        if request.reply.is_none() {
            continue;
        }
        if waits_for_fsync(&request.subject) {
            // The stream's lock is let go for the fsync, and so is this task: stream info,
            // message and direct gets queued behind are answered meanwhile. Bounded: past the
            // limit, this task waits for a permit, as it would have waited for the fsync.
            let Ok(permit) = fsyncing.clone().acquire_owned().await else { return };
            tokio::spawn(async move {
                serve_one(&jetstream, &request);
                drop(permit);
            });
            continue;
        }
        serve_one(&jetstream, &request);
    }
}

/// Whether the request waits for its stream's fsync before it is answered.
fn waits_for_fsync(subject: &str) -> bool {
    let tokens: Vec<&str> = subject.split('.').skip(2).collect();
    matches!(tokens.as_slice(), ["STREAM", "PURGE", _] | ["STREAM", "MSG", "DELETE", _])
}

/// Handles one request and publishes its response.
fn serve_one(jetstream: &JetStream, request: &Request) {
    let Some(reply) = request.reply.as_deref() else { return };
    let services = jetstream.services();
    let tokens: Vec<&str> = request.subject.split('.').skip(2).collect();
    let response = handle(services, jetstream, reply, &tokens, &request.payload);
    bump(&jetstream.api_requests);
    if response.as_ref().is_some_and(|r| r.get("error").is_some()) {
        bump(&jetstream.api_errors);
    }
    if let Some(response) = response {
        services.bus.publish(reply, None, response.to_string().as_bytes());
    }
}

fn response_type(kind: &str) -> String {
    format!("io.nats.jetstream.api.v1.{kind}_response")
}

/// Serializes a handler's result with its response type.
fn respond(kind: &str, result: Result<Value, ApiError>) -> Value {
    let response_type = response_type(kind);
    match result {
        Ok(mut body) => {
            body["type"] = json!(response_type);
            body
        }
        Err(error) => error.to_json(&response_type),
    }
}

/// Parses a request body; an empty body is the type's default.
fn parse<T: DeserializeOwned + Default>(payload: &[u8]) -> Result<T, ApiError> {
    if payload.iter().all(u8::is_ascii_whitespace) || payload.trim_ascii() == b"null" {
        return Ok(T::default());
    }
    serde_json::from_slice(payload).map_err(ApiError::invalid_json)
}

fn handle(services: &Services, jetstream: &JetStream, reply: &str, tokens: &[&str], payload: &[u8]) -> Option<Value> {
    if let ["DIRECT", "GET", stream, subject @ ..] = tokens {
        super::direct::get(services, jetstream, reply, stream, subject, payload);
        return None;
    }
    let response = match tokens {
        ["INFO"] => respond("account_info", Ok(super::account::info(jetstream))),
        ["STREAM", "CREATE", name] => respond("stream_create", create_stream(jetstream, name, payload)),
        ["STREAM", "UPDATE", name] => respond("stream_update", update_stream(jetstream, name, payload)),
        ["STREAM", "INFO", name] => paged(respond("stream_info", stream_info_request(jetstream, name, payload))),
        ["STREAM", "DELETE", name] => {
            respond("stream_delete", jetstream.delete_stream(name).map(|()| json!({ "success": true })))
        }
        ["STREAM", "PURGE", name] => {
            with_default(respond("stream_purge", purge(jetstream, name, payload)), "purged", json!(0))
        }
        ["STREAM", "NAMES"] => respond("stream_names", stream_names(jetstream, payload)),
        ["STREAM", "LIST"] => respond("stream_list", stream_list(jetstream, payload)),
        ["STREAM", "MSG", "GET", name] => respond("stream_msg_get", get_message(jetstream, name, payload)),
        ["STREAM", "MSG", "DELETE", name] => respond("stream_msg_delete", delete_message(jetstream, name, payload)),
        ["CONSUMER", "CREATE", stream] => {
            respond("consumer_create", create_consumer(jetstream, stream, CreateSubject::default(), payload))
        }
        ["CONSUMER", "CREATE", stream, name, filter @ ..] => {
            let filter = (!filter.is_empty()).then(|| filter.join("."));
            let subject = CreateSubject { name: Some(name), filter, durable: false };
            respond("consumer_create", create_consumer(jetstream, stream, subject, payload))
        }
        ["CONSUMER", "DURABLE", "CREATE", stream, name] => {
            let subject = CreateSubject { name: Some(name), filter: None, durable: true };
            respond("consumer_create", create_consumer(jetstream, stream, subject, payload))
        }
        ["CONSUMER", "INFO", stream, name] => {
            respond("consumer_info", find_consumer(jetstream, stream, name).map(|c| c.info()))
        }
        ["CONSUMER", "DELETE", stream, name] => respond("consumer_delete", delete_consumer(jetstream, stream, name)),
        ["CONSUMER", "PAUSE", stream, name] => {
            respond("consumer_pause", pause_consumer(jetstream, stream, name, payload))
        }
        ["CONSUMER", "UNPIN", stream, name] => {
            respond("consumer_unpin", unpin_consumer(jetstream, stream, name, payload))
        }
        ["CONSUMER", "NAMES", stream] => with_default(
            paged(respond("consumer_names", consumer_names(jetstream, stream, payload))),
            "consumers",
            json!([]),
        ),
        ["CONSUMER", "LIST", stream] => respond("consumer_list", consumer_list(jetstream, stream, payload)),
        ["CONSUMER", "MSG", "NEXT", stream, name] => match find_consumer(jetstream, stream, name) {
            Ok(consumer) => {
                consumer.request_next(reply, payload);
                return None;
            }
            // nats-server does not answer a pull request for a missing consumer: the client's
            // request times out.
            Err(_) => return None,
        },
        _ => respond("error", Err(ApiError::bad_request())),
    };
    Some(response)
}

/// nats-server's paged responses carry `total`, `offset` and `limit` always, errors included
/// (zero when there is nothing to page).
fn paged(mut response: Value) -> Value {
    for key in ["total", "offset", "limit"] {
        response = with_default(response, key, json!(0));
    }
    response
}

/// Sets `key` to `value` unless the response has it (fields nats-server's responses always have).
fn with_default(mut response: Value, key: &str, value: Value) -> Value {
    if let Some(object) = response.as_object_mut() {
        object.entry(key).or_insert(value);
    }
    response
}

fn stream_config_from(name: &str, payload: &[u8]) -> Result<StreamConfig, ApiError> {
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_json("empty request"));
    }
    let config: StreamConfig = serde_json::from_slice(payload).map_err(ApiError::invalid_json)?;
    if config.name != name {
        return Err(ApiError::stream_mismatch());
    }
    Ok(config)
}

fn create_stream(jetstream: &JetStream, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let stream = jetstream.create_stream(stream_config_from(name, payload)?)?;
    let mut info = stream_info(&stream);
    // nats-server sets it on every successful create, the idempotent repeat included.
    info["did_create"] = json!(true);
    Ok(info)
}

fn update_stream(jetstream: &JetStream, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let stream = jetstream.update_stream(stream_config_from(name, payload)?)?;
    Ok(stream_info(&stream))
}

/// Optional body of `STREAM.INFO`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StreamInfoRequest {
    subjects_filter: Option<String>,
    offset: usize,
}

fn stream_info_request(jetstream: &JetStream, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let request: StreamInfoRequest = parse(payload)?;
    let stream = jetstream.stream(name).ok_or_else(ApiError::stream_not_found)?;
    let mut info = stream_info(&stream);
    let filter = request.subjects_filter.as_deref().filter(|filter| !filter.is_empty());
    if let Some(filter) = filter {
        // Subject details are paged like nats-server's: sorted, `offset`, at most a page.
        let counts = stream.store().subjects_state(Some(filter));
        if !counts.is_empty() {
            let total = counts.len();
            let offset = request.offset.min(total);
            let page: std::collections::BTreeMap<&String, &u64> =
                counts.iter().skip(offset).take(limits::API_SUBJECT_DETAILS_MAX).collect();
            info["state"]["subjects"] = json!(page);
            info["total"] = json!(total);
            info["offset"] = json!(offset);
            info["limit"] = json!(limits::API_SUBJECT_DETAILS_MAX);
        }
    }
    Ok(info)
}

/// The stream info body shared by create, update, info and list.
pub fn stream_info(stream: &Stream) -> Value {
    let state = stream.state();
    // A stream that never stored anything reports first_seq 0, as nats-server does.
    let first_seq = if state.last_seq == 0 && state.msgs == 0 { 0 } else { state.first_seq };
    let mut state_json = json!({
        "messages": state.msgs,
        "bytes": state.bytes,
        "first_seq": first_seq,
        "first_ts": timestamp(state.first_ts),
        "last_seq": state.last_seq,
        "last_ts": timestamp(state.last_ts),
        "consumer_count": stream.consumer_count(),
    });
    // Omitted when zero, as nats-server omits them.
    if state.num_subjects > 0 {
        state_json["num_subjects"] = json!(state.num_subjects);
    }
    if state.num_deleted > 0 {
        state_json["num_deleted"] = json!(state.num_deleted);
    }
    let mut info = json!({
        "config": *stream.config(),
        "created": clock::rfc3339(stream.created),
        "state": state_json,
        "ts": clock::rfc3339(std::time::SystemTime::now()),
    });
    if let Some(damage) = state.corruption {
        info["semaq"] = json!({ "corruption": damage });
    }
    if let Some(reason) = stream.store().poisoned() {
        // A write or fsync failed: the stream serves reads but takes no messages until restarted.
        info["semaq"]["write_error"] = json!(reason);
    }
    let level = super::schema::describe_level(&stream.services().registry, &stream.config());
    info["semaq"]["level"] = level["level"].clone();
    info["semaq"]["enforces"] = level["enforces"].clone();
    if let Some(provenance) = stream.provenance() {
        info["semaq"]["provenance"] = provenance.info(&stream.config());
    }
    if let Some(producers) = stream.producers_info() {
        info["semaq"]["producers"] = producers;
    }
    if let Some(jetstream) = stream.jetstream() {
        jetstream.sources.describe(&stream.name, &mut info);
    }
    info
}

fn timestamp(unix_ns: i64) -> String {
    if unix_ns <= 0 {
        "0001-01-01T00:00:00Z".to_string()
    } else {
        clock::rfc3339(clock::system_time(unix_ns))
    }
}

/// Body of `STREAM.PURGE`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PurgeRequestBody {
    filter: Option<String>,
    seq: Option<u64>,
    keep: Option<u64>,
}

fn purge(jetstream: &JetStream, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let mut request: PurgeRequestBody = parse(payload)?;
    // nats-server reads 0 as "not set" for both, and refuses the two together.
    request.seq = request.seq.filter(|seq| *seq > 0);
    request.keep = request.keep.filter(|keep| *keep > 0);
    if request.seq.is_some() && request.keep.is_some() {
        return Err(ApiError::bad_request());
    }
    let stream = jetstream.stream(name).ok_or_else(ApiError::stream_not_found)?;
    let config = stream.config();
    if config.sealed {
        return Err(ApiError::sealed());
    }
    if config.deny_purge {
        return Err(ApiError::purge_failed("stream purge not permitted"));
    }
    if stream.provenance().is_some() && request.filter.as_deref().is_some_and(|filter| !filter.is_empty()) {
        return Err(ApiError::append_only("a purge with a subject filter"));
    }
    let purge = semaq_store::PurgeRequest { subject: request.filter, keep: request.keep, up_to_seq: request.seq };
    let purged = stream.purge(&purge)?;
    stream.notify_changed();
    Ok(json!({ "success": true, "purged": purged }))
}

/// Paging for NAMES and LIST.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListRequest {
    offset: usize,
    subject: Option<String>,
}

fn matching_streams(jetstream: &JetStream, request: &ListRequest) -> Vec<Arc<Stream>> {
    jetstream
        .streams()
        .into_iter()
        .filter(|stream| match &request.subject {
            Some(filter) => stream.config().subjects.iter().any(|s| semaq_wire::subject::overlaps(s, filter)),
            None => true,
        })
        .collect()
}

fn stream_names(jetstream: &JetStream, payload: &[u8]) -> Result<Value, ApiError> {
    let request: ListRequest = parse(payload)?;
    let streams = matching_streams(jetstream, &request);
    let total = streams.len();
    let offset = request.offset.min(total);
    let names: Vec<String> =
        streams.iter().skip(offset).take(limits::API_LIST_NAMES_MAX).map(|s| s.name.clone()).collect();
    Ok(json!({ "total": total, "offset": offset, "limit": limits::API_LIST_NAMES_MAX, "streams": names }))
}

fn stream_list(jetstream: &JetStream, payload: &[u8]) -> Result<Value, ApiError> {
    let request: ListRequest = parse(payload)?;
    let streams = matching_streams(jetstream, &request);
    let total = streams.len();
    let offset = request.offset.min(total);
    let infos: Vec<Value> =
        streams.iter().skip(offset).take(limits::API_LIST_INFOS_MAX).map(|s| stream_info(s)).collect();
    Ok(json!({ "total": total, "offset": offset, "limit": limits::API_LIST_INFOS_MAX, "streams": infos }))
}

/// Body of `STREAM.MSG.GET` (and `DIRECT.GET`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct GetRequest {
    /// Exact sequence, or the start for `next_by_subj`.
    pub seq: Option<u64>,
    /// Newest message on this subject.
    pub last_by_subj: Option<String>,
    /// First message at or after `seq` on this subject.
    pub next_by_subj: Option<String>,
    /// Batched gets (DIRECT.GET only; refused by MSG.GET as nats-server refuses them).
    pub batch: u64,
    /// Bytes of a batched get.
    pub max_bytes: u64,
}

impl GetRequest {
    /// nats-server's rule: `seq` and `last_by_subj` exclude each other, `next_by_subj` may
    /// take `seq` as its start, and one of them is needed.
    pub fn check(&self) -> Result<(), ApiError> {
        let seq = self.seq.unwrap_or(0);
        let (last, next) = (self.last_by_subj.is_some(), self.next_by_subj.is_some());
        if (seq > 0 && last) || (seq == 0 && !last && !next) || (last && next) {
            return Err(ApiError::bad_request());
        }
        Ok(())
    }
}

/// Finds the message a get request names.
pub fn find_message(stream: &Stream, request: &GetRequest) -> Result<semaq_store::StoredMessage, ApiError> {
    request.check()?;
    let store = stream.store();
    let seq = request.seq.unwrap_or(0);
    let found = match (&request.last_by_subj, &request.next_by_subj) {
        (_, Some(subject)) => store.get_next(seq, Some(subject)),
        (None, None) => store.get(seq),
        (Some(subject), None) => store.get_last_for_subject(subject),
    };
    found.map_err(store_error)?.ok_or_else(ApiError::no_message_found)
}

fn get_message(jetstream: &JetStream, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request());
    }
    let request: GetRequest = parse(payload)?;
    if request.batch > 0 || request.max_bytes > 0 {
        return Err(ApiError::bad_request());
    }
    request.check()?;
    let stream = jetstream.stream(name).ok_or_else(ApiError::stream_not_found)?;
    let message = find_message(&stream, &request)?;
    let base64 = base64::engine::general_purpose::STANDARD;
    let mut body = json!({
        "subject": message.subject,
        "seq": message.seq,
        "data": base64.encode(&message.payload),
        "time": timestamp(message.timestamp_ns),
    });
    let headers = match stream.provenance() {
        Some(provenance) => provenance.annotate(message.seq, message.headers),
        None => message.headers,
    };
    if let Some(headers) = &headers {
        body["hdrs"] = json!(base64.encode(headers));
    }
    Ok(json!({ "message": body }))
}

/// Body of `STREAM.MSG.DELETE`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DeleteRequest {
    seq: u64,
    no_erase: bool,
}

fn delete_message(jetstream: &JetStream, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let request: DeleteRequest = parse(payload)?;
    let _ = request.no_erase;
    let stream = jetstream.stream(name).ok_or_else(ApiError::stream_not_found)?;
    let config = stream.config();
    if config.sealed {
        return Err(ApiError::sealed());
    }
    if config.deny_delete {
        return Err(ApiError::message_delete_failed("message delete not permitted"));
    }
    if stream.provenance().is_some() {
        return Err(ApiError::append_only("deleting a message"));
    }
    let last_seq = stream.state().last_seq;
    if request.seq == 0 || request.seq > last_seq {
        // nats-server's store answers a sequence past its end with this.
        return Err(ApiError::message_delete_failed("stream store EOF"));
    }
    let deleted = stream.delete_message(request.seq)?;
    if !deleted {
        return Err(ApiError::sequence_not_found(request.seq));
    }
    stream.notify_changed();
    Ok(json!({ "success": true }))
}

fn create_consumer(
    jetstream: &JetStream,
    stream_name: &str,
    subject: CreateSubject<'_>,
    payload: &[u8],
) -> Result<Value, ApiError> {
    let stream = jetstream.stream(stream_name).ok_or_else(ApiError::stream_not_found)?;
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_json("unexpected end of JSON input"));
    }
    let request: CreateRequest = serde_json::from_slice(payload).map_err(ApiError::invalid_json)?;
    if !jetstream.account().has_stream_limits() {
        return Err(ApiError::no_limits());
    }
    consumers::create(&stream, request, subject, &jetstream.account().limits)
}

fn find_consumer(jetstream: &JetStream, stream: &str, name: &str) -> Result<Arc<Consumer>, ApiError> {
    let stream = jetstream.stream(stream).ok_or_else(ApiError::stream_not_found)?;
    stream.consumer(name).ok_or_else(ApiError::consumer_not_found)
}

fn delete_consumer(jetstream: &JetStream, stream: &str, name: &str) -> Result<Value, ApiError> {
    let stream = jetstream.stream(stream).ok_or_else(ApiError::stream_not_found)?;
    if !stream.remove_consumer(name) {
        return Err(ApiError::consumer_not_found());
    }
    Ok(json!({ "success": true }))
}

/// Body of `CONSUMER.PAUSE`: no time (or a past one) resumes.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PauseRequest {
    pause_until: Option<String>,
}

fn pause_consumer(jetstream: &JetStream, stream: &str, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let request: PauseRequest = parse(payload)?;
    let until = match request.pause_until {
        Some(text) => match clock::parse_rfc3339(&text) {
            // Kept in UTC, as nats-server keeps it.
            Some(ns) => Some(timestamp_nanos(ns)),
            None => return Err(ApiError::invalid_json(format!("parsing time {text:?}: not RFC 3339"))),
        },
        None => None,
    };
    let consumer = find_consumer(jetstream, stream, name)?;
    Ok(consumer.pause(until))
}

/// Body of `CONSUMER.UNPIN`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UnpinRequest {
    group: String,
}

fn unpin_consumer(jetstream: &JetStream, stream: &str, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let request: UnpinRequest = parse(payload)?;
    if request.group.is_empty() {
        return Err(ApiError::invalid_json("consumer group not specified"));
    }
    if !request.group.bytes().all(|b| b.is_ascii_alphanumeric() || b"/_=-".contains(&b)) || request.group.len() > 16 {
        return Err(ApiError::invalid_group_name());
    }
    let consumer = find_consumer(jetstream, stream, name)?;
    consumer.unpin(&request.group)?;
    Ok(json!({}))
}

/// RFC 3339 in UTC as Go's RFC3339Nano writes it: trailing zeros of the fraction dropped.
fn timestamp_nanos(unix_ns: i64) -> String {
    let text = clock::rfc3339_nanos(unix_ns);
    match text.strip_suffix('Z').and_then(|t| t.split_once('.')) {
        Some((whole, fraction)) => {
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                format!("{whole}Z")
            } else {
                format!("{whole}.{fraction}Z")
            }
        }
        None => text,
    }
}

fn consumer_names(jetstream: &JetStream, stream: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let request: ListRequest = parse(payload)?;
    let stream = jetstream.stream(stream).ok_or_else(ApiError::stream_not_found)?;
    let consumers = stream.consumers();
    let offset = request.offset.min(consumers.len());
    let names: Vec<String> =
        consumers.iter().skip(offset).take(limits::API_LIST_NAMES_MAX).map(|c| c.name.clone()).collect();
    Ok(json!({
        "total": consumers.len(),
        "offset": offset,
        "limit": limits::API_LIST_NAMES_MAX,
        "consumers": names,
    }))
}

fn consumer_list(jetstream: &JetStream, stream: &str, payload: &[u8]) -> Result<Value, ApiError> {
    let request: ListRequest = parse(payload)?;
    let stream = jetstream.stream(stream).ok_or_else(ApiError::stream_not_found)?;
    let consumers = stream.consumers();
    let offset = request.offset.min(consumers.len());
    let infos: Vec<Value> = consumers.iter().skip(offset).take(limits::API_LIST_INFOS_MAX).map(|c| c.info()).collect();
    Ok(json!({
        "total": consumers.len(),
        "offset": offset,
        "limit": limits::API_LIST_INFOS_MAX,
        "consumers": infos,
    }))
}
