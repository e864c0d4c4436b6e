//! The provenance API of level-4 streams.
//!
//! - `$SEMAQ.API.STREAM.PROVENANCE.<stream>`, request `{"offset": n}` (optional): JSON with the
//!   algorithm, public key (hex), head, the context headers required, and a page of checkpoints
//!   (`total`, `offset`, `limit`, `checkpoints: [{seq, head, signature}]`). The same JSON at
//!   `GET /semaq/streams/<name>/provenance?offset=n` on the monitoring port.
//! - `$SEMAQ.API.STREAM.CHAIN.<stream>`, request `{"from_seq": n, "max_bytes": b}`: a binary
//!   chain page (`semaq_store::chain::page`) with the stored messages' exact bytes, for
//!   `semaq verify`; errors are JSON.
//!
//! Requests are queued (bounded) and answered by one task of their own, off the JetStream API's
//! queue, since a chain page reads up to a megabyte of messages.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use semaq_store::chain::page;
use semaq_store::StoreError;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{checkpoint_json, Provenance, LEVEL};
use crate::delivery::{QueuedRequest, RequestQueue};
use crate::jetstream::errors::ApiError;
use crate::jetstream::stream::Stream;
use crate::jetstream::JetStream;
use crate::limits;

/// Subject of the key-and-checkpoints request, before the stream name.
pub const PROVENANCE_PREFIX: &str = "$SEMAQ.API.STREAM.PROVENANCE.";
/// Subject of the chain page request, before the stream name.
pub const CHAIN_PREFIX: &str = "$SEMAQ.API.STREAM.CHAIN.";
/// The JSON answer's `type`.
const RESPONSE_TYPE: &str = "io.semaq.api.v1.stream_provenance_response";
/// The `type` of a chain page request's error.
const CHAIN_RESPONSE_TYPE: &str = "io.semaq.api.v1.stream_chain_response";

/// Subscribes to both request subjects and starts the task that answers.
pub fn start(jetstream: Arc<JetStream>) {
    let (queue, requests) = mpsc::channel(limits::PROVENANCE_API_QUEUE_REQUESTS_MAX);
    let sink = Arc::new(RequestQueue { queue });
    for prefix in [PROVENANCE_PREFIX, CHAIN_PREFIX] {
        if let Err(error) = jetstream.services().bus.subscribe_internal(&format!("{prefix}*"), None, sink.clone()) {
            tracing::error!(%error, "cannot subscribe to {prefix}*");
        }
    }
    tokio::spawn(serve(Arc::downgrade(&jetstream), requests));
}

async fn serve(jetstream: Weak<JetStream>, mut requests: mpsc::Receiver<QueuedRequest>) {
    while let Some(request) = requests.recv().await {
        let Some(jetstream) = jetstream.upgrade() else { return };
        // Reading a page touches the disk: let the runtime move other tasks off this worker.
        let answer = tokio::task::block_in_place(|| answer(&jetstream, &request));
        jetstream.services().bus.publish(&request.reply, None, &answer);
    }
}

fn answer(jetstream: &JetStream, request: &QueuedRequest) -> Vec<u8> {
    if let Some(name) = request.subject.strip_prefix(PROVENANCE_PREFIX) {
        let offset = parse::<ProvenanceRequest>(&request.payload).map(|r| r.offset);
        let body = offset.and_then(|offset| provenance_json(jetstream, name, offset));
        return respond(RESPONSE_TYPE, body).to_string().into_bytes();
    }
    let name = request.subject.strip_prefix(CHAIN_PREFIX).unwrap_or_default();
    match parse::<PageRequest>(&request.payload).and_then(|r| chain_page(jetstream, name, &r)) {
        Ok(page) => page,
        Err(error) => error.to_json(CHAIN_RESPONSE_TYPE).to_string().into_bytes(),
    }
}

fn respond(response_type: &str, result: Result<Value, ApiError>) -> Value {
    match result {
        Ok(mut body) => {
            body["type"] = json!(response_type);
            body
        }
        Err(error) => error.to_json(response_type),
    }
}

/// Body of a provenance request.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ProvenanceRequest {
    /// First checkpoint (by position) to list.
    offset: u64,
}

/// Body of a chain page request.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PageRequest {
    /// First sequence wanted.
    from_seq: u64,
    /// Bytes of messages wanted at most (0: the server's maximum).
    max_bytes: usize,
}

fn parse<T: serde::de::DeserializeOwned + Default>(payload: &[u8]) -> Result<T, ApiError> {
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(payload).map_err(ApiError::invalid_json)
}

fn l4_stream(jetstream: &JetStream, name: &str) -> Result<(Arc<Stream>, Arc<Provenance>), ApiError> {
    let stream = jetstream.stream(name).ok_or_else(ApiError::stream_not_found)?;
    let level = stream.config().level();
    let provenance =
        stream.provenance().filter(|_| level == LEVEL).ok_or_else(|| ApiError::not_level_4(name, level))?;
    Ok((stream, provenance))
}

/// The key, head and a page of checkpoints from position `offset`.
pub fn provenance_json(jetstream: &JetStream, name: &str, offset: u64) -> Result<Value, ApiError> {
    let (stream, provenance) = l4_stream(jetstream, name)?;
    let mut body = provenance.info(&stream.config());
    let (checkpoints, total, offset) = provenance.checkpoints_page(offset);
    body["stream"] = json!(name);
    body["total"] = json!(total);
    body["offset"] = json!(offset);
    body["limit"] = json!(limits::PROVENANCE_API_CHECKPOINTS_MAX);
    body["checkpoints"] = checkpoints.iter().map(checkpoint_json).collect();
    Ok(body)
}

/// Stored messages from `from_seq` on, with their exact bytes, up to `max_bytes`.
fn chain_page(jetstream: &JetStream, name: &str, request: &PageRequest) -> Result<Vec<u8>, ApiError> {
    let (stream, _) = l4_stream(jetstream, name)?;
    let max_bytes = match request.max_bytes {
        0 => limits::PROVENANCE_PAGE_BYTES_MAX,
        wanted => wanted.min(limits::PROVENANCE_PAGE_BYTES_MAX),
    };
    let state = stream.state();
    let mut out = page::start(state.first_seq, state.last_seq);
    let (mut next, mut count, mut bytes) = (request.from_seq.max(1), 0u32, 0usize);
    'pages: while next <= state.last_seq && bytes < max_bytes {
        // The store lock is taken per bounded chunk, so ingest is never held up for a whole page.
        let store = stream.store();
        for _ in 0..limits::PROVENANCE_PAGE_LOCK_MESSAGES_MAX {
            match store.get_next(next, None) {
                Ok(Some(message)) if message.seq <= state.last_seq => {
                    page::push_record(&mut out, &message.view()).map_err(ApiError::storage)?;
                    next = message.seq + 1;
                    count += 1;
                    bytes += page::RECORD_PREFIX_BYTES + message.subject.len() + message.payload.len();
                    bytes += message.headers.as_ref().map_or(0, Bytes::len);
                    if bytes >= max_bytes {
                        break 'pages;
                    }
                }
                Ok(_) => {
                    next = state.last_seq + 1;
                    break 'pages;
                }
                // A damaged record is left out: the verifier names the missing sequence.
                Err(StoreError::Corrupt { seq, .. }) => next = seq + 1,
                Err(error) => return Err(ApiError::storage(error)),
            }
        }
    }
    page::finish(&mut out, next, count);
    Ok(out)
}

/// The HTTP route, merged into the monitoring router.
pub fn routes() -> Router<Option<Arc<JetStream>>> {
    Router::new().route("/semaq/streams/{name}/provenance", get(http_provenance))
}

async fn http_provenance(
    State(jetstream): State<Option<Arc<JetStream>>>,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let offset = match params.get("offset").map(|text| text.parse::<u64>()) {
        None => Ok(0),
        Some(Ok(offset)) => Ok(offset),
        Some(Err(error)) => Err(ApiError::invalid_json(format!("offset: {error}"))),
    };
    let result = match &jetstream {
        Some(jetstream) => offset.and_then(|offset| provenance_json(jetstream, &name, offset)),
        None => Err(ApiError::not_enabled()),
    };
    let status = match &result {
        Ok(_) => StatusCode::OK,
        Err(error) => StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    };
    (status, Json(respond(RESPONSE_TYPE, result))).into_response()
}
