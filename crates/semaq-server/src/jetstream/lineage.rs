//! L4 lineage: the `Semaq-Parent` graph (SPEC §2, §5).
//!
//! A message names what it was derived from in `Semaq-Parent`: comma-separated references, each
//! `STREAM:SEQ` or a `Nats-Msg-Id` value (a reference shaped like `NAME:DIGITS` with a valid
//! stream name is read as `STREAM:SEQ`; ids cannot contain commas). On L4 streams the broker
//! checks them at publish, before the message is stored:
//!
//! - a malformed reference is refused;
//! - `STREAM:SEQ` must name an existing stream and a sequence it has already stored (at most its
//!   last sequence), so a message can only point backwards in time and cycles cannot be built;
//! - a `Nats-Msg-Id` is looked up in each stream (the publishing stream first) among the
//!   messages stored within that stream's duplicate window, like the dedup window the id was
//!   made for. Each L4 stream keeps a bounded map of the ids it stored ([`MsgIds`], at most
//!   [`limits::LINEAGE_MSG_IDS_PER_STREAM_MAX`] ids and
//!   [`limits::LINEAGE_MSG_IDS_BYTES_PER_STREAM_MAX`] bytes). When the map cannot know every id
//!   of the window (after a restart, or when the stream was raised to L4), the first lookup
//!   rebuilds it from the store, reading the window back newest first within the map's own
//!   bounds, and its misses are trusted from then on. Streams below L4 keep no map: their newest
//!   [`limits::LINEAGE_MSG_ID_SCAN_MESSAGES_MAX`] messages are searched. When found, the
//!   resolution is stored with the message as
//!   `Semaq-Parent-Resolved` (the references in order, ids replaced by `STREAM:SEQ`), so the
//!   graph never changes when ids age out; an id not found stays an unresolved reference.
//!
//! `$SEMAQ.API.LINEAGE.<stream>.<seq>` answers the ancestry of one message as a graph of nodes
//! and edges, walked breadth-first with a visited set (the walk also covers lower-level streams,
//! whose references were never checked) and bounded in depth and nodes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use semaq_store::{StoreError, StoredMessage, StreamStore};
use semaq_wire::headers::names;
use semaq_wire::{clock, Headers};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::config::StreamConfig;
use super::errors::ApiError;
use super::stream::{header, Inbound, Stream};
use super::JetStream;
use crate::delivery::{QueuedRequest, RequestQueue};
use crate::limits;
use crate::sync::lock;

/// The prefix of the lineage API subjects.
pub const API_PREFIX: &str = "$SEMAQ.API.LINEAGE";
/// The response type of the lineage API.
const RESPONSE_TYPE: &str = "io.semaq.api.v1.lineage_response";

/// One parent reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reference {
    /// A stored message.
    Stored {
        /// Its stream.
        stream: String,
        /// Its sequence.
        seq: u64,
    },
    /// A `Nats-Msg-Id` value not resolved to a stored message.
    MsgId(String),
}

impl Reference {
    /// Reads one reference (already trimmed).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("an empty reference".into());
        }
        if text.len() > limits::LINEAGE_REFERENCE_BYTES_MAX {
            return Err(format!("a reference longer than {} bytes", limits::LINEAGE_REFERENCE_BYTES_MAX));
        }
        if text.chars().any(char::is_control) {
            return Err(format!("{text:?} holds control characters"));
        }
        let stored = text.rsplit_once(':').filter(|(stream, seq)| {
            super::is_valid_name(stream) && !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit())
        });
        match stored {
            Some((stream, seq)) => match seq.parse::<u64>() {
                Ok(seq) if seq > 0 => Ok(Reference::Stored { stream: stream.to_string(), seq }),
                _ => Err(format!("{text:?}: a sequence is a number from 1")),
            },
            None => Ok(Reference::MsgId(text.to_string())),
        }
    }

    /// The node id in a lineage answer: `STREAM:SEQ`, or `msg-id:<id>`.
    pub fn node_id(&self) -> String {
        match self {
            Reference::Stored { stream, seq } => format!("{stream}:{seq}"),
            Reference::MsgId(id) => format!("msg-id:{id}"),
        }
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reference::Stored { stream, seq } => write!(f, "{stream}:{seq}"),
            Reference::MsgId(id) => f.write_str(id),
        }
    }
}

/// Reads a `Semaq-Parent` value: comma-separated references, at most
/// [`limits::LINEAGE_PARENTS_PER_MESSAGE_MAX`].
pub fn parse_references(value: &str) -> Result<Vec<Reference>, String> {
    let parts: Vec<&str> = value.split(',').map(str::trim).collect();
    if parts.len() > limits::LINEAGE_PARENTS_PER_MESSAGE_MAX {
        return Err(format!("more than {} parents", limits::LINEAGE_PARENTS_PER_MESSAGE_MAX));
    }
    parts.into_iter().map(Reference::parse).collect()
}

/// What the lineage checks decided for one message of an ingest batch.
#[derive(Debug)]
enum Decision {
    /// Nothing to change.
    Keep,
    /// Store with this `Semaq-Parent-Resolved` value.
    Record(String),
    /// Refuse the message.
    Refuse(ApiError),
}

/// The lineage decisions for an ingest batch, by position; empty below L4. Made before the
/// stream's store lock is taken, because resolving an id reads other streams' stores and two
/// streams holding their own lock while reading each other's would deadlock.
#[derive(Debug, Default)]
pub struct Parents {
    decisions: Vec<Decision>,
}

impl Parents {
    /// Checks the `Semaq-Parent` references of every message of `batch` (L4 streams only).
    pub fn check(stream: &Stream, config: &StreamConfig, batch: &[Inbound]) -> Self {
        if config.level() < 4 {
            return Self::default();
        }
        let jetstream = stream.jetstream();
        let decisions = batch.iter().map(|message| decide(jetstream.as_deref(), &stream.name, message)).collect();
        Self { decisions }
    }

    /// Applies the decision for the message at `index`: the resolution header is added, or the
    /// refusal returned.
    pub fn apply(&mut self, index: usize, message: &mut Inbound) -> Result<(), ApiError> {
        let Some(decision) = self.decisions.get_mut(index) else { return Ok(()) };
        match std::mem::replace(decision, Decision::Keep) {
            Decision::Keep => Ok(()),
            Decision::Refuse(error) => Err(error),
            Decision::Record(resolved) => {
                let block = message.headers.as_deref().unwrap_or_default();
                let extended = super::schema::with_header(block, names::PARENT_RESOLVED, &resolved);
                message.headers = Some(Bytes::from(extended));
                Ok(())
            }
        }
    }
}

/// A message refused for its lineage (SemaQ's own code: nats-server has none).
fn refused(reason: impl std::fmt::Display) -> ApiError {
    ApiError { code: 400, err_code: 10450, description: format!("invalid {}: {reason}", names::PARENT) }
}

fn decide(jetstream: Option<&JetStream>, own: &str, message: &Inbound) -> Decision {
    let Some(block) = message.headers.as_deref() else { return Decision::Keep };
    let [resolved, parent] = Headers::new(block).get_many(&[names::PARENT_RESOLVED, names::PARENT]);
    if resolved.is_some() {
        return Decision::Refuse(refused(format!(
            "{} is set by the server, not by publishers",
            names::PARENT_RESOLVED
        )));
    }
    let Some(value) = parent else { return Decision::Keep };
    let references = match parse_references(value) {
        Ok(references) => references,
        Err(reason) => return Decision::Refuse(refused(reason)),
    };
    let Some(jetstream) = jetstream else { return Decision::Refuse(refused("JetStream is not available")) };
    let mut resolved_any = false;
    let mut resolved = Vec::with_capacity(references.len());
    for reference in references {
        match &reference {
            Reference::Stored { stream, seq } => {
                let Some(parent) = jetstream.stream(stream) else {
                    return Decision::Refuse(refused(format!("{reference}: no stream {stream:?}")));
                };
                let last = *parent.watch_last_seq().borrow();
                if *seq > last {
                    return Decision::Refuse(refused(format!(
                        "{reference} is not stored yet (stream {stream} has stored up to sequence {last}): \
                         a parent must be stored before its children"
                    )));
                }
                resolved.push(reference.to_string());
            }
            Reference::MsgId(id) => match resolve_msg_id(jetstream, own, id) {
                Some(found) => {
                    resolved_any = true;
                    resolved.push(found.to_string());
                }
                None => resolved.push(reference.to_string()),
            },
        }
    }
    if resolved_any {
        Decision::Record(resolved.join(","))
    } else {
        Decision::Keep
    }
}

/// Finds the stored message with `Nats-Msg-Id: id` among the newest of each stream (see the
/// module doc for the bounds), the publishing stream `own` first.
fn resolve_msg_id(jetstream: &JetStream, own: &str, id: &str) -> Option<Reference> {
    let mut streams = jetstream.streams();
    streams.sort_by_key(|stream| stream.name != own);
    streams.iter().take(limits::LINEAGE_MSG_ID_SCAN_STREAMS_MAX).find_map(|stream| {
        let seq = find_msg_id(stream, id)?;
        Some(Reference::Stored { stream: stream.name.clone(), seq })
    })
}

/// Level 4: the `Nats-Msg-Id`s one stream stored within its duplicate window, so that a parent
/// named by id resolves with one lookup however many messages came since. Bounded in ids and
/// bytes (the oldest go first); entries of messages removed later are checked against the store
/// when they are used. Every message an L4 stream stores passes through [`MsgIds::record`], id
/// or not, so the map knows when it has seen every message since some time: messages stored
/// before the process started, or while the stream was below L4, leave a gap in the sequences
/// it saw, and until the window has passed since the gap a miss is not trusted, unless the map
/// is rebuilt from the store ([`MsgIds::rebuild`]). Lock order: after the stream's store.
#[derive(Debug)]
pub struct MsgIds {
    /// The sequence the next recorded message should have if none was stored unrecorded.
    next_seq: AtomicU64,
    /// Every message stored since then (unix ns) was recorded, as far as `next_seq` says.
    complete_since_ns: AtomicI64,
    inner: Mutex<MsgIdsInner>,
}

#[derive(Debug, Default)]
struct MsgIdsInner {
    /// Id → (stream sequence, stored at unix ns).
    by_id: HashMap<String, (u64, i64)>,
    /// (stored at, sequence, id), oldest first.
    order: VecDeque<(i64, u64, String)>,
    /// Bytes of the ids held (each is held twice).
    bytes: usize,
}

impl MsgIds {
    /// An empty map for a stream whose last stored sequence is `last_seq`: complete when the
    /// stream is empty, else only for what is stored from `now_ns` on.
    pub fn new(last_seq: u64, now_ns: i64) -> Self {
        let complete_since_ns = if last_seq == 0 { i64::MIN } else { now_ns };
        Self {
            next_seq: AtomicU64::new(last_seq.saturating_add(1)),
            complete_since_ns: AtomicI64::new(complete_since_ns),
            inner: Mutex::new(MsgIdsInner::default()),
        }
    }

    /// Records the message just stored as `seq` at `now_ns` (its `Nats-Msg-Id`, if any), and
    /// forgets ids older than `window_ns` or beyond the bounds. Called by one ingest task.
    pub fn record(&self, headers: Option<&[u8]>, seq: u64, now_ns: i64, window_ns: i64) {
        if self.next_seq.swap(seq.saturating_add(1), Ordering::Relaxed) != seq {
            // Messages were stored without passing here: ids from before now may be missing.
            self.complete_since_ns.store(now_ns, Ordering::Relaxed);
        }
        let Some(id) = headers.and_then(recordable_id) else { return };
        let mut inner = lock(&self.inner);
        inner.push(id, seq, now_ns);
        inner.expire(now_ns, window_ns);
    }

    /// Whether every message the stream stored up to `stored_last_seq` since `oldest_ns` was
    /// recorded, so a miss is trusted.
    fn complete(&self, oldest_ns: i64, stored_last_seq: u64) -> bool {
        let recorded_all = self.next_seq.load(Ordering::Relaxed) > stored_last_seq;
        recorded_all && oldest_ns > self.complete_since_ns.load(Ordering::Relaxed)
    }

    /// Makes the map complete again when it is not: replaces it with the ids of the messages
    /// `store` holds from the last `window_ns`, read newest first, at most
    /// [`limits::LINEAGE_MSG_IDS_PER_STREAM_MAX`] messages and ids of at most
    /// [`limits::LINEAGE_MSG_IDS_BYTES_PER_STREAM_MAX`] bytes, as the map would hold had it seen
    /// them stored (ids further back are missed as ones the bounds dropped would be). Called with
    /// the stream's store locked, so no message is stored meanwhile; returns whether it read.
    pub fn rebuild(&self, store: &dyn StreamStore, now_ns: i64, window_ns: i64) -> bool {
        let state = store.state();
        let oldest_ns = now_ns.saturating_sub(window_ns);
        if self.complete(oldest_ns, state.last_seq) {
            return false;
        }
        let mut found = Vec::new();
        let mut bytes = 0;
        let lowest = state.first_seq.max(1);
        let mut seq = state.last_seq;
        for _ in 0..limits::LINEAGE_MSG_IDS_PER_STREAM_MAX {
            if seq < lowest {
                break;
            }
            let message = match store.get(seq) {
                Ok(Some(message)) if message.timestamp_ns < oldest_ns => break,
                Ok(Some(message)) => message,
                // Removed, or unreadable: no id to learn from it.
                Ok(None) | Err(StoreError::Corrupt { .. }) => {
                    seq -= 1;
                    continue;
                }
                Err(error) => {
                    tracing::error!(%error, "cannot read the stored message ids back; lineage keeps what it has");
                    return false;
                }
            };
            if let Some(id) = message.headers.as_deref().and_then(|block| recordable_id(block)) {
                bytes += 2 * id.len();
                if bytes > limits::LINEAGE_MSG_IDS_BYTES_PER_STREAM_MAX {
                    break;
                }
                found.push((message.timestamp_ns, seq, id.to_string()));
            }
            seq -= 1;
        }
        let mut rebuilt = MsgIdsInner::default();
        for (stored_ns, seq, id) in found.into_iter().rev() {
            rebuilt.push(&id, seq, stored_ns);
        }
        *lock(&self.inner) = rebuilt;
        self.next_seq.store(state.last_seq.saturating_add(1), Ordering::Relaxed);
        self.complete_since_ns.store(i64::MIN, Ordering::Relaxed);
        true
    }

    /// The sequence the stream stored `id` at within `window_ns` of `now_ns`: `Some(None)` when
    /// it did not, `None` when the map cannot tell (the window reaches back before it was
    /// complete, or the stream has stored up to `stored_last_seq` and not every one was recorded).
    fn find(&self, id: &str, now_ns: i64, window_ns: i64, stored_last_seq: u64) -> Option<Option<u64>> {
        let oldest_ns = now_ns.saturating_sub(window_ns);
        let found = lock(&self.inner).by_id.get(id).filter(|(_, stored_ns)| *stored_ns >= oldest_ns).map(|e| e.0);
        match found {
            Some(seq) => Some(Some(seq)),
            None if self.complete(oldest_ns, stored_last_seq) => Some(None),
            None => None,
        }
    }
}

/// A message's `Nats-Msg-Id` when the map keeps it: a longer id cannot be named in `Semaq-Parent`.
fn recordable_id(block: &[u8]) -> Option<&str> {
    let id = Headers::new(block).get(header::MSG_ID)?;
    (!id.is_empty() && id.len() <= limits::LINEAGE_REFERENCE_BYTES_MAX).then_some(id)
}

impl MsgIdsInner {
    fn push(&mut self, id: &str, seq: u64, stored_ns: i64) {
        self.bytes += 2 * id.len();
        self.by_id.insert(id.to_string(), (seq, stored_ns));
        self.order.push_back((stored_ns, seq, id.to_string()));
    }

    fn expire(&mut self, now_ns: i64, window_ns: i64) {
        while let Some((stored_ns, seq, id)) = self.order.front() {
            let over = self.order.len() > limits::LINEAGE_MSG_IDS_PER_STREAM_MAX
                || self.bytes > limits::LINEAGE_MSG_IDS_BYTES_PER_STREAM_MAX;
            if !over && now_ns.saturating_sub(*stored_ns) <= window_ns {
                break;
            }
            // A later message may have stored the same id again: that entry stays.
            if self.by_id.get(id.as_str()).is_some_and(|(newest, _)| newest == seq) {
                self.by_id.remove(id.as_str());
            }
            self.bytes -= 2 * id.len();
            self.order.pop_front();
        }
    }
}

/// The sequence `stream` stored `id` at, within its duplicate window.
fn find_msg_id(stream: &Stream, id: &str) -> Option<u64> {
    let config = stream.config();
    let window_ns = match config.duplicate_window {
        0 => super::config::DUPLICATE_WINDOW_DEFAULT_NS,
        window => window,
    };
    let now = clock::unix_nanos_now();
    let ids = stream.msg_ids();
    let known = match ids.find(id, now, window_ns, *stream.watch_last_seq().borrow()) {
        Some(known) => known,
        // An L4 map records every message from now on: rebuilt once, it can tell again.
        None if config.level() >= 4 => {
            ids.rebuild(&**stream.store(), now, window_ns);
            ids.find(id, now, window_ns, *stream.watch_last_seq().borrow())?
        }
        None => return scan_for_msg_id(stream, id, now - window_ns),
    };
    // Removed since, or stored again under another id? The store has the last word.
    known.filter(|&seq| stored_with_id(stream, seq, id))
}

fn stored_with_id(stream: &Stream, seq: u64, id: &str) -> bool {
    let message = stream.store().get(seq).ok().flatten();
    message.as_ref().and_then(|m| m.headers.as_deref()).and_then(|h| Headers::new(h).get(header::MSG_ID)) == Some(id)
}

/// The newest messages stored since `oldest_ns`, newest first, at most
/// [`limits::LINEAGE_MSG_ID_SCAN_MESSAGES_MAX`] of them.
fn scan_for_msg_id(stream: &Stream, id: &str, oldest_ns: i64) -> Option<u64> {
    let store = stream.store();
    let state = store.state();
    let mut seq = state.last_seq;
    for _ in 0..limits::LINEAGE_MSG_ID_SCAN_MESSAGES_MAX {
        if seq == 0 || seq < state.first_seq {
            return None;
        }
        if let Ok(Some(message)) = store.get(seq) {
            if message.timestamp_ns < oldest_ns {
                return None;
            }
            if message.headers.as_deref().and_then(|h| Headers::new(h).get(header::MSG_ID)) == Some(id) {
                return Some(seq);
            }
        }
        seq -= 1;
    }
    None
}

/// Optional body of a lineage request.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct LineageRequest {
    /// Generations to walk up (at most [`limits::LINEAGE_DEPTH_MAX`]).
    depth: Option<usize>,
    /// Nodes to return (at most [`limits::LINEAGE_NODES_MAX`]).
    nodes: Option<usize>,
}

/// The ancestry of `stream:seq` as `{root, nodes, edges, truncated, depth_max, nodes_max}`.
pub fn ancestry(
    jetstream: &JetStream,
    stream: &str,
    seq: u64,
    depth_max: usize,
    nodes_max: usize,
) -> Result<Value, ApiError> {
    let root_stream = jetstream.stream(stream).ok_or_else(ApiError::stream_not_found)?;
    let root_message = root_stream.store().get(seq).map_err(super::stream::store_error)?;
    if root_message.is_none() {
        return Err(ApiError::no_message_found());
    }
    let root = Reference::Stored { stream: stream.to_string(), seq };
    let mut visited = HashSet::from([root.clone()]);
    let mut queue = VecDeque::from([(root.clone(), 0usize)]);
    let (mut nodes, mut edges, mut truncated) = (Vec::new(), Vec::new(), false);
    while let Some((reference, depth)) = queue.pop_front() {
        let (mut node, parents) = describe(jetstream, &reference);
        if depth >= depth_max && !parents.is_empty() {
            node["more_parents"] = json!(true);
            truncated = true;
            nodes.push(node);
            continue;
        }
        nodes.push(node);
        for parent in parents {
            if visited.contains(&parent) {
                edges.push(json!({ "from": reference.node_id(), "to": parent.node_id() }));
                continue;
            }
            if visited.len() >= nodes_max {
                truncated = true;
                continue;
            }
            edges.push(json!({ "from": reference.node_id(), "to": parent.node_id() }));
            visited.insert(parent.clone());
            queue.push_back((parent, depth + 1));
        }
    }
    Ok(json!({
        "type": RESPONSE_TYPE,
        "root": root.node_id(),
        "nodes": nodes,
        "edges": edges,
        "truncated": truncated,
        "depth_max": depth_max,
        "nodes_max": nodes_max,
    }))
}

/// One node of the graph and its parents (none for messages that are not stored).
fn describe(jetstream: &JetStream, reference: &Reference) -> (Value, Vec<Reference>) {
    let id = reference.node_id();
    let Reference::Stored { stream: name, seq } = reference else {
        let Reference::MsgId(msg_id) = reference else { unreachable!("two variants") };
        return (json!({ "id": id, "status": "unresolved", "msg_id": msg_id }), Vec::new());
    };
    let base = json!({ "id": id, "stream": name, "seq": seq });
    let Some(stream) = jetstream.stream(name) else { return (with_status(base, "unknown_stream"), Vec::new()) };
    let found = stream.store().get(*seq);
    match found {
        Ok(Some(message)) => stored_node(base, &message),
        Ok(None) if *seq <= stream.state().last_seq => (with_status(base, "deleted"), Vec::new()),
        Ok(None) => (with_status(base, "unknown"), Vec::new()),
        Err(error) => {
            let mut node = with_status(base, "unreadable");
            node["error"] = json!(error.to_string());
            (node, Vec::new())
        }
    }
}

fn with_status(mut node: Value, status: &str) -> Value {
    node["status"] = json!(status);
    node
}

fn stored_node(mut node: Value, message: &StoredMessage) -> (Value, Vec<Reference>) {
    let wanted =
        [names::EVENT_TIME, names::PRODUCER, names::HASH, header::MSG_ID, names::PARENT_RESOLVED, names::PARENT];
    let [event_time, producer, hash, msg_id, resolved, parent] =
        Headers::new(message.headers.as_deref().unwrap_or_default()).get_many(&wanted);
    let stored_time = clock::rfc3339(clock::system_time(message.timestamp_ns));
    node["status"] = json!("stored");
    node["subject"] = json!(message.subject);
    node["stored_time"] = json!(stored_time);
    match event_time {
        Some(event_time) => node["time"] = json!(readable_event_time(event_time)),
        None => node["time"] = json!(stored_time),
    }
    for (key, value) in [("producer", producer), ("hash", hash), ("msg_id", msg_id)] {
        if let Some(value) = value {
            node[key] = json!(value);
        }
    }
    let parents = match resolved.or(parent).map(parse_references) {
        None => Vec::new(),
        Some(Ok(parents)) => parents,
        Some(Err(reason)) => {
            node["parent_error"] = json!(reason);
            Vec::new()
        }
    };
    node["parents"] = json!(parents.iter().map(Reference::node_id).collect::<Vec<_>>());
    (node, parents)
}

/// An event time as RFC 3339: integer unix nanoseconds are converted, text is kept as sent.
fn readable_event_time(text: &str) -> String {
    match text.trim().parse::<i64>() {
        Ok(unix_ns) => clock::rfc3339(clock::system_time(unix_ns)),
        Err(_) => text.to_string(),
    }
}

/// Answers one request on `$SEMAQ.API.LINEAGE.<stream>.<seq>`.
pub fn handle(jetstream: &JetStream, subject: &str, payload: &[u8]) -> Value {
    let answer = (|| {
        let target = subject.strip_prefix(API_PREFIX).and_then(|rest| rest.strip_prefix('.'));
        let (stream, seq) = target.and_then(|t| t.rsplit_once('.')).ok_or_else(ApiError::bad_request)?;
        let seq: u64 = seq.parse().map_err(|_| ApiError::bad_request())?;
        let request: LineageRequest = if payload.trim_ascii().is_empty() {
            LineageRequest::default()
        } else {
            serde_json::from_slice(payload).map_err(ApiError::invalid_json)?
        };
        let depth = request.depth.unwrap_or(limits::LINEAGE_DEPTH_MAX).min(limits::LINEAGE_DEPTH_MAX);
        let nodes = request.nodes.unwrap_or(limits::LINEAGE_NODES_MAX).clamp(1, limits::LINEAGE_NODES_MAX);
        ancestry(jetstream, stream, seq, depth, nodes)
    })();
    answer.unwrap_or_else(|error| error.to_json(RESPONSE_TYPE))
}

/// Subscribes to `$SEMAQ.API.LINEAGE.>` and starts the task that answers.
pub fn start(jetstream: &Arc<JetStream>) {
    let (queue, requests) = mpsc::channel(limits::LINEAGE_API_QUEUE_REQUESTS_MAX);
    let bus = &jetstream.services().bus;
    if let Err(error) = bus.subscribe_internal(&format!("{API_PREFIX}.>"), None, Arc::new(RequestQueue { queue })) {
        tracing::error!(%error, "cannot subscribe to the lineage API");
        return;
    }
    tokio::spawn(serve(Arc::downgrade(jetstream), requests));
}

async fn serve(jetstream: Weak<JetStream>, mut requests: mpsc::Receiver<QueuedRequest>) {
    while let Some(request) = requests.recv().await {
        let Some(jetstream) = jetstream.upgrade() else { return };
        // Reading stores blocks: let the runtime move other tasks off this worker meanwhile.
        let answer = tokio::task::block_in_place(|| handle(&jetstream, &request.subject, &request.payload));
        jetstream.services().bus.publish(&request.reply, None, answer.to_string().as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_stream_sequences_or_message_ids() {
        let stored = |stream: &str, seq| Reference::Stored { stream: stream.into(), seq };
        assert_eq!(
            parse_references("QUERIES:1, q-17 ,a b:3").unwrap(),
            vec![stored("QUERIES", 1), Reference::MsgId("q-17".into()), Reference::MsgId("a b:3".into())]
        );
        assert_eq!(Reference::parse("urn:uuid:5").unwrap(), stored("urn:uuid", 5), "stream names may hold colons");
        assert!(Reference::parse("QUERIES:0").unwrap_err().contains("from 1"));
        assert!(parse_references("A:1,,B:2").unwrap_err().contains("empty"));
        assert!(parse_references(&vec!["A:1"; limits::LINEAGE_PARENTS_PER_MESSAGE_MAX + 1].join(",")).is_err());
        assert_eq!(stored("A", 2).node_id(), "A:2");
        assert_eq!(Reference::MsgId("x".into()).node_id(), "msg-id:x");
    }

    fn id_block(id: &str) -> Vec<u8> {
        format!("NATS/1.0\r\nNats-Msg-Id: {id}\r\n\r\n").into_bytes()
    }

    #[test]
    fn message_ids_are_found_beyond_any_scan_within_the_window() {
        let ids = MsgIds::new(0, 0);
        let window = 1_000;
        let count = 10 * limits::LINEAGE_MSG_ID_SCAN_MESSAGES_MAX as u64;
        for seq in 1..=count {
            ids.record(Some(&id_block(&format!("id-{seq}"))), seq, 100, window);
        }
        ids.record(None, count + 1, 100, window);
        let last = count + 1;
        assert_eq!(ids.find("id-1", 100, window, last), Some(Some(1)), "the first of {count}");
        assert_eq!(ids.find("id-77", 1_100, window, last), Some(Some(77)), "at the window's edge");
        assert_eq!(ids.find("id-77", 1_101, window, last), Some(None), "past the window");
        assert_eq!(ids.find("nope", 100, window, last), Some(None), "a complete map knows what it lacks");
        assert_eq!(ids.find("nope", 100, window, last + 1), None, "a message stored unrecorded needs a scan");
    }

    #[test]
    fn ids_stored_before_the_map_began_are_not_known_until_it_is_rebuilt() {
        let restored = MsgIds::new(50, 1_000);
        restored.record(Some(&id_block("new")), 51, 1_000, 100);
        assert_eq!(restored.find("new", 1_050, 100, 51), Some(Some(51)));
        assert_eq!(restored.find("old", 1_050, 100, 51), None, "the window reaches before the start");
        assert_eq!(restored.find("old", 1_101, 100, 51), Some(None), "a window after the start is complete");
        restored.record(None, 60, 2_000, 100);
        assert_eq!(restored.find("old", 2_050, 100, 60), None, "a gap in the sequences starts over");
    }

    #[test]
    fn a_map_that_cannot_tell_is_rebuilt_once_from_the_window_in_the_store() {
        let mut store = semaq_store::MemoryStore::new(semaq_store::StoreLimits::default());
        let window = 1_000;
        for seq in 1..=3_000i64 {
            // Stored 10 ns apart, the newest at 30_000: the window holds the last 100.
            let block = (seq % 2 == 0).then(|| id_block(&format!("id-{seq}")));
            store.append("s", block.as_deref(), b"{}", seq * 10).unwrap();
        }
        store.delete(2_990).unwrap();
        let now = 30_000;
        let restored = MsgIds::new(3_000, now);
        assert_eq!(restored.find("id-2950", now, window, 3_000), None, "ids stored before the start are unknown");
        assert!(restored.rebuild(&store, now, window));
        assert_eq!(restored.find("id-2950", now, window, 3_000), Some(Some(2_950)), "within the window");
        assert_eq!(restored.find("id-2990", now, window, 3_000), Some(None), "removed before the rebuild");
        assert_eq!(
            restored.find("id-2000", now, window, 3_000),
            Some(None),
            "stored before the window: a trusted miss"
        );
        assert_eq!(lock(&restored.inner).order.len(), 50, "ids of the window only, not of the 3,000 messages");
        assert!(!restored.rebuild(&store, now, window), "once complete, never read again");
        restored.record(Some(&id_block("after")), 3_001, now + 1, window);
        assert_eq!(restored.find("after", now + 1, window, 3_001), Some(Some(3_001)), "records go on from the rebuild");
    }

    #[test]
    fn message_ids_are_bounded_and_a_reused_id_keeps_its_newest_sequence() {
        let ids = MsgIds::new(0, 0);
        let window = i64::MAX;
        ids.record(Some(&id_block("again")), 1, 0, window);
        ids.record(Some(&id_block("again")), 2, 0, window);
        for seq in 3..=(limits::LINEAGE_MSG_IDS_PER_STREAM_MAX as u64 + 1) {
            ids.record(Some(&id_block(&seq.to_string())), seq, 0, window);
        }
        assert_eq!(ids.find("again", 0, window, 0), Some(Some(2)), "evicting the first entry kept the second");
        ids.record(Some(&id_block("last")), limits::LINEAGE_MSG_IDS_PER_STREAM_MAX as u64 + 2, 0, window);
        assert_eq!(ids.find("again", 0, window, 0), Some(None), "the oldest go first");
        let inner = lock(&ids.inner);
        assert_eq!(inner.order.len(), limits::LINEAGE_MSG_IDS_PER_STREAM_MAX);
        assert_eq!(inner.bytes, inner.order.iter().map(|(_, _, id)| 2 * id.len()).sum::<usize>());
        let long = "x".repeat(limits::LINEAGE_REFERENCE_BYTES_MAX + 1);
        drop(inner);
        ids.record(Some(&id_block(&long)), limits::LINEAGE_MSG_IDS_PER_STREAM_MAX as u64 + 3, 0, window);
        assert_eq!(ids.find(&long, 0, window, 0), Some(None), "an id no reference can name is not kept");
    }

    #[test]
    fn event_times_read_as_rfc_3339() {
        assert_eq!(readable_event_time("2026-01-02T03:04:05Z"), "2026-01-02T03:04:05Z");
        assert!(readable_event_time("1767323045000000000").starts_with("2026-01-02T03:04:05"));
    }
}
