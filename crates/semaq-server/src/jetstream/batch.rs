//! Atomic batch publish, as nats-server 2.12: messages with `Nats-Batch-Id`, numbered by
//! `Nats-Batch-Sequence` from 1, the last with `Nats-Batch-Commit` (`1`: commit including this
//! message; `eob`: commit excluding it). Every message of a committed batch is stored, one after
//! another, and becomes visible to consumers at once, or none is.
//!
//! - Staging: an open batch waits in memory in the stream's ingest task (bounded per batch, per
//!   connection and per stream; `limits.rs`). Each staged message is answered with an empty reply,
//!   as nats-server does. A batch idle longer than its timeout is abandoned; a crash forgets it.
//! - Commit: every message is checked first (the checks below plus the stream's own: L4 context
//!   and event times, schema, producer sequences, dedup ids, expected headers, limits), then all
//!   are appended under the store lock, which consumers need to read, and the fsync that follows
//!   covers them together. A failure while appending (a store error) removes what the batch
//!   appended (with no fsync under the lock: a rollback marker in the log, durable before
//!   anything appended after it) and undoes its producer and dedup records, and on L4 its links:
//!   the chain head goes back to before the batch and the next message links over the removed
//!   sequences. The commit's PubAck carries `batch` and `count`.
//! - Crash: the last stored message of a batch carries `Nats-Batch-Commit: 1`. One task appends,
//!   so only the stream's tail can hold a batch cut short; start-up removes such a tail
//!   ([`remove_incomplete_tail`]) before an L4 stream's chain head is rebuilt. No checkpoint
//!   signs a batch's messages before the batch is synced, so none signs a removed one.
//! - Abandoned: a batch that times out, or that a message ends with a gap, a bad commit or too
//!   much size, is dropped and announced once on `$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>`
//!   with nats-server's advisory body (reason `timeout`, `incomplete` or `large`). A commit the
//!   checks refuse is answered to its publisher instead, as nats-server does.
//!
//! On streams of level 3 and above `allow_atomic` is always on (`StreamConfig::apply_exactly_once`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use semaq_store::StreamStore;
use semaq_wire::{clock, Headers};

use super::config::{Discard, StreamConfig};
use super::errors::ApiError;
use super::failpoint::{self, Failpoint, FAILPOINT_ENV};
use super::producers;
use super::stream::{header as js_header, store_error, Inbound, Ingest, PendingAck, Stream};
use crate::delivery::{FlushSet, Message};
use crate::limits;

/// Batch headers (nats-server's names).
pub mod header {
    pub use semaq_wire::headers::names::{BATCH_COMMIT, BATCH_ID, BATCH_SEQUENCE};
}

/// The subject prefix of the advisory announcing an abandoned batch (nats-server's); the
/// stream's name follows.
pub const ABANDONED_ADVISORY_PREFIX: &str = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED";
/// The advisory's `type`.
const ABANDONED_ADVISORY_TYPE: &str = "io.nats.jetstream.advisory.v1.stream_batch_abandoned";

/// Why a batch was abandoned: nats-server's `reason` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abandon {
    /// Idle longer than the batch timeout.
    Timeout,
    /// More messages or bytes than a batch may hold.
    Large,
    /// A sequence gap, a bad commit, or a message arriving after the timeout.
    Incomplete,
}

impl Abandon {
    fn reason(self) -> &'static str {
        match self {
            Abandon::Timeout => "timeout",
            Abandon::Large => "large",
            Abandon::Incomplete => "incomplete",
        }
    }
}

/// A batch waiting for its commit.
#[derive(Debug)]
struct Open {
    messages: Vec<Inbound>,
    bytes: usize,
    last_active: Instant,
    connection: Option<u64>,
}

/// A committed batch, ready to be checked and stored.
#[derive(Debug)]
pub struct Commit {
    /// `Nats-Batch-Id`.
    pub id: String,
    /// Its messages in order (without an `eob` marker).
    pub messages: Vec<Inbound>,
    /// Where the commit's PubAck goes.
    pub reply: Option<String>,
}

/// What the ingest task does with an arriving message.
#[derive(Debug)]
pub enum Route {
    /// Not part of a batch: store it on its own.
    Single(Inbound),
    /// Staged in an open batch (its empty reply is queued).
    Staged,
    /// Refused: the PubAck error to send.
    Refused(Option<String>, ApiError),
    /// The last message of a batch arrived: store the whole batch.
    Commit(Commit),
}

/// A reply the ingest task sends once the batch of appends it belongs to is synced.
#[derive(Debug)]
enum Reply {
    /// A staged message: an empty message, as nats-server sends.
    Staged(String),
    /// A stored batch: its PubAck (or, when the sync failed, the error).
    Committed { reply: String, outcome: Result<(u64, String, u64), ApiError> },
}

/// One stream's open atomic batches, owned by its ingest task.
#[derive(Debug, Default)]
pub struct Batches {
    open: HashMap<String, Open>,
    staged_bytes: usize,
    replies: Vec<Reply>,
    /// Batches abandoned since the last [`Batches::send_replies`], to announce: one entry per
    /// batch removed from `open`, so at most the open batches plus one per message routed.
    abandoned: Vec<(String, Abandon)>,
}

impl Batches {
    /// The messages of the atomic batches that `incoming` commits: those staged, then those
    /// arriving with the commit (in `incoming`). For what must be decided before the store's
    /// lock is taken (the L3 producer snapshot a commit may need, `Stream::snapshot_before_batch`).
    pub fn committed_by<'a>(&'a self, incoming: &'a [Inbound]) -> (Vec<&'a Inbound>, Vec<&'a Inbound>) {
        let id_of = |message: &'a Inbound| {
            let block = message.headers.as_deref().unwrap_or_default();
            Headers::new(block).get(header::BATCH_ID).filter(|id| !id.is_empty())
        };
        let committing: HashSet<&str> = (incoming.iter())
            .filter(|message| {
                let block = message.headers.as_deref().unwrap_or_default();
                Headers::new(block).get(header::BATCH_COMMIT).is_some()
            })
            .filter_map(id_of)
            .collect();
        let staged = committing.iter().filter_map(|id| self.open.get(*id)).flat_map(|open| &open.messages);
        let arriving = incoming.iter().filter(|message| id_of(message).is_some_and(|id| committing.contains(id)));
        (staged.collect(), arriving.collect())
    }

    /// Sorts a message: on its own, staged, refused, or the commit of its batch.
    pub fn route(&mut self, config: &StreamConfig, message: Inbound, now: Instant) -> Route {
        let id = match message.headers.as_deref().and_then(|block| Headers::new(block).get(header::BATCH_ID)) {
            Some(id) if !id.is_empty() => id.to_string(),
            _ => return Route::Single(message),
        };
        match self.stage(config, &id, message, now) {
            Ok(route) => route,
            Err((reply, error)) => Route::Refused(reply, error),
        }
    }

    fn stage(
        &mut self,
        config: &StreamConfig,
        id: &str,
        message: Inbound,
        now: Instant,
    ) -> Result<Route, (Option<String>, ApiError)> {
        let refuse = |error: ApiError| (message.reply.clone(), error);
        if !config.allow_atomic {
            return Err(refuse(ApiError::atomic_publish_disabled()));
        }
        if id.len() > limits::ATOMIC_BATCH_ID_BYTES_MAX {
            return Err(refuse(ApiError::atomic_publish_invalid_id()));
        }
        let block = message.headers.as_deref().unwrap_or_default();
        let [seq, commit] = Headers::new(block).get_many(&[header::BATCH_SEQUENCE, header::BATCH_COMMIT]);
        let Some(seq) = seq.and_then(|text| text.parse::<u64>().ok()) else {
            return Err(refuse(ApiError::atomic_publish_missing_seq()));
        };
        let eob = commit == Some("eob");
        // The "end of batch" marker is not stored, so it does not count toward the size.
        let size = seq.saturating_sub(u64::from(eob));
        if !self.open.contains_key(id) {
            if seq != 1 {
                let too_large = size > limits::ATOMIC_BATCH_MESSAGES_MAX as u64;
                return Err(refuse(if too_large { too_large_error() } else { ApiError::atomic_publish_incomplete() }));
            }
            self.open_batch(id, message.publisher, now).map_err(refuse)?;
        }
        let message_bytes = message.headers.as_ref().map_or(0, Bytes::len) + message.payload.len();
        let problem = self.problem(id, seq, size, message_bytes, commit, now, config.batch_timeout());
        if let Some((reason, error)) = problem {
            self.abandon(id, reason);
            return Err(refuse(error));
        }
        let Some(open) = self.open.get_mut(id) else { return Err(refuse(ApiError::atomic_publish_incomplete())) };
        open.last_active = now;
        if commit.is_none() {
            open.bytes += message_bytes;
            self.staged_bytes += message_bytes;
            if let Some(reply) = message.reply.clone().filter(|_| !config.no_ack) {
                self.replies.push(Reply::Staged(reply));
            }
            open.messages.push(message);
            return Ok(Route::Staged);
        }
        let Some(mut open) = self.open.remove(id) else { return Err(refuse(ApiError::atomic_publish_incomplete())) };
        self.staged_bytes -= open.bytes;
        let reply = message.reply.clone();
        if !eob {
            open.messages.push(message);
        }
        Ok(Route::Commit(Commit { id: id.to_string(), messages: open.messages, reply }))
    }

    /// Opens a batch, within the stream's and the connection's bounds.
    fn open_batch(&mut self, id: &str, connection: Option<u64>, now: Instant) -> Result<(), ApiError> {
        let by_connection = self.open.values().filter(|open| open.connection == connection).count();
        if self.open.len() >= limits::ATOMIC_BATCHES_PER_STREAM_MAX
            || (connection.is_some() && by_connection >= limits::ATOMIC_BATCHES_PER_CONNECTION_MAX)
        {
            return Err(ApiError::atomic_publish_too_many_inflight());
        }
        let open = Open { messages: Vec::new(), bytes: 0, last_active: now, connection };
        self.open.insert(id.to_string(), open);
        Ok(())
    }

    /// Why the next message of open batch `id` ends it, if it does (nats-server's order of checks).
    #[allow(clippy::too_many_arguments)]
    fn problem(
        &self,
        id: &str,
        seq: u64,
        size: u64,
        message_bytes: usize,
        commit: Option<&str>,
        now: Instant,
        timeout: Duration,
    ) -> Option<(Abandon, ApiError)> {
        let open = self.open.get(id)?;
        if commit.is_some_and(|commit| commit != "1" && commit != "eob") {
            return Some((Abandon::Incomplete, ApiError::atomic_publish_invalid_commit()));
        }
        if now.duration_since(open.last_active) > timeout {
            return Some((Abandon::Timeout, ApiError::atomic_publish_incomplete()));
        }
        let eob = commit == Some("eob");
        if seq != open.messages.len() as u64 + 1 || (seq == 1 && eob) {
            return Some((Abandon::Incomplete, ApiError::atomic_publish_incomplete()));
        }
        if size > limits::ATOMIC_BATCH_MESSAGES_MAX as u64 {
            return Some((Abandon::Large, too_large_error()));
        }
        let staged = if eob { 0 } else { message_bytes };
        if open.bytes + staged > limits::ATOMIC_BATCH_BYTES_MAX
            || self.staged_bytes + staged > limits::ATOMIC_BATCH_STAGED_BYTES_PER_STREAM_MAX
        {
            let error = ApiError::atomic_publish_too_large(format!(
                "{} bytes staged at most per batch",
                limits::ATOMIC_BATCH_BYTES_MAX
            ));
            return Some((Abandon::Large, error));
        }
        None
    }

    /// Drops open batch `id` and queues its advisory (once: a batch no longer open is not announced).
    fn abandon(&mut self, id: &str, reason: Abandon) {
        if let Some(open) = self.open.remove(id) {
            self.staged_bytes -= open.bytes;
            self.abandoned.push((id.to_string(), reason));
        }
    }

    /// Abandons batches idle longer than `timeout`; returns how many.
    pub fn expire(&mut self, timeout: Duration, now: Instant) -> usize {
        let expired: Vec<String> = self
            .open
            .iter()
            .filter(|(_, open)| now.duration_since(open.last_active) > timeout)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            tracing::debug!(batch = %id, "abandoning an idle atomic batch");
            self.abandon(id, Abandon::Timeout);
        }
        expired.len()
    }

    /// Open batches right now.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The sync after the appends failed: committed batches are answered with the error instead.
    pub fn refuse_commits(&mut self, error: &ApiError) {
        for reply in &mut self.replies {
            if let Reply::Committed { outcome, .. } = reply {
                *outcome = Err(error.clone());
            }
        }
    }

    /// Sends the queued replies (after the sync that made committed batches durable) and the
    /// advisories of abandoned batches.
    pub fn send_replies(&mut self, stream: &Stream) {
        if self.replies.is_empty() && self.abandoned.is_empty() {
            return;
        }
        let services = stream.services();
        let domain = &services.options.jetstream_domain;
        let mut flush = FlushSet::default();
        let advisory_subject = format!("{ABANDONED_ADVISORY_PREFIX}.{}", stream.name);
        let advisories = self.abandoned.drain(..).map(|(batch, reason)| {
            (advisory_subject.clone(), abandoned_advisory(&stream.name, domain.as_deref(), &batch, reason))
        });
        let replies = self.replies.drain(..).map(|reply| match reply {
            Reply::Staged(subject) => (subject, Vec::new()),
            Reply::Committed { reply, outcome } => (reply, commit_ack(&stream.name, domain.as_deref(), outcome)),
        });
        for (subject, body) in replies.chain(advisories) {
            let message = Message { subject: &subject, reply: None, headers: None, payload: &body, publisher: None };
            services.bus.publish_batched(&subject, &message, &mut flush);
        }
        flush.flush();
    }
}

/// nats-server's `JSStreamBatchAbandonedAdvisory` body (without `account`: SemaQ's accounts
/// share one subject space).
fn abandoned_advisory(stream: &str, domain: Option<&str>, batch: &str, reason: Abandon) -> Vec<u8> {
    let mut advisory = serde_json::json!({
        "type": ABANDONED_ADVISORY_TYPE,
        "id": advisory_id(),
        "timestamp": clock::rfc3339(std::time::SystemTime::now()),
        "stream": stream,
        "batch": batch,
        "reason": reason.reason(),
    });
    if let Some(domain) = domain {
        advisory["domain"] = serde_json::json!(domain);
    }
    advisory.to_string().into_bytes()
}

/// A unique event id, shaped like nats-server's (22 base-62 characters, as a NUID).
fn advisory_id() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..22).map(|_| ALPHABET[rand::random::<u32>() as usize % ALPHABET.len()] as char).collect()
}

fn too_large_error() -> ApiError {
    ApiError::atomic_publish_too_large(limits::ATOMIC_BATCH_MESSAGES_MAX)
}

/// The commit's PubAck body: the last message's sequence, the batch id and its size.
fn commit_ack(stream: &str, domain: Option<&str>, outcome: Result<(u64, String, u64), ApiError>) -> Vec<u8> {
    let body = match outcome {
        Ok((seq, id, count)) => {
            let mut ack = super::stream::pub_ack_json(stream, domain, Ok((seq, false)));
            ack["batch"] = serde_json::json!(id);
            ack["count"] = serde_json::json!(count);
            ack
        }
        Err(error) => super::stream::pub_ack_json(stream, domain, Err(error)),
    };
    body.to_string().into_bytes()
}

/// Checks and stores a committed batch; returns whether anything was stored (to be synced).
/// A refusal goes to `acks` as the commit's PubAck error; success waits in `batches` for the sync.
pub fn commit(
    stream: &Stream,
    ingest: &mut Ingest<'_, '_>,
    commit: Commit,
    batches: &mut Batches,
    acks: &mut Vec<PendingAck>,
) -> bool {
    let Commit { id, mut messages, reply } = commit;
    if let Err(error) = precheck(ingest, &messages) {
        acks.push((reply, Err(error), None));
        return false;
    }
    if let Some(last) = messages.last_mut() {
        mark_committed(last);
    }
    let count = messages.len() as u64;
    match append_all(stream, ingest, messages) {
        Ok(last_seq) => {
            if let Some(reply) = reply.filter(|_| !ingest.config.no_ack) {
                batches.replies.push(Reply::Committed { reply, outcome: Ok((last_seq, id, count)) });
            }
            true
        }
        Err(error) => {
            acks.push((reply, Err(error), None));
            false
        }
    }
}

/// Whether the batch's appends could roll into a full queue of pending seals, whose oldest the
/// store would then complete in place, its fsyncs under the lock: the appends cannot be split,
/// so the ingest commits aside before the batch (`StreamStore::commit_before_appends`).
pub fn commit_before(ingest: &Ingest<'_, '_>, commit: &Commit) -> bool {
    let message_bytes: usize = (commit.messages.iter())
        .map(|m| m.subject.len() + m.headers.as_ref().map_or(0, Bytes::len) + m.payload.len())
        .map(|bytes| bytes + limits::ATOMIC_BATCH_ADDED_BYTES_PER_MESSAGE_MAX)
        .sum();
    ingest.store.commit_before_appends(commit.messages.len() as u64, message_bytes as u64)
}

/// The last stored message of a batch says the batch is complete (`eob` commits add it).
fn mark_committed(message: &mut Inbound) {
    let block = message.headers.as_deref().unwrap_or_default();
    if Headers::new(block).get(header::BATCH_COMMIT) == Some("1") {
        return;
    }
    let line = format!("{}: 1\r\n", header::BATCH_COMMIT);
    let marked = match block.strip_suffix(b"\r\n\r\n") {
        Some(head) => [head, b"\r\n", line.as_bytes(), b"\r\n"].concat(),
        None => format!("NATS/1.0\r\n{line}\r\n").into_bytes(),
    };
    message.headers = Some(Bytes::from(marked));
}

/// Everything that can refuse a batch before anything is appended, so a refusal leaves no trace.
/// L4 context first: a refused batch must not auto-evolve the schema.
fn precheck(ingest: &mut Ingest<'_, '_>, messages: &[Inbound]) -> Result<(), ApiError> {
    let config = ingest.config;
    if config.sealed {
        return Err(ApiError::sealed());
    }
    if let Some(chain) = ingest.chain.as_deref_mut() {
        chain.precheck(&*ingest.store, messages)?;
    }
    let mut ids = HashSet::new();
    let mut subjects = HashSet::new();
    let mut bytes = 0u64;
    for (index, message) in messages.iter().enumerate() {
        let block = message.headers.as_deref().unwrap_or_default();
        let size = block.len() + message.payload.len();
        if config.max_msg_size >= 0 && size as i64 > config.max_msg_size {
            return Err(ApiError::message_too_large());
        }
        bytes +=
            ingest.store.size_model().message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
        if ingest.chain.is_some() {
            // L4 stores the block sealed: its end replaced by the two chain lines.
            bytes += (semaq_store::chain::SEAL_BYTES - 4) as u64;
        }
        let [last_msg_id, msg_id] = Headers::new(block).get_many(&[js_header::EXPECTED_LAST_MSG_ID, js_header::MSG_ID]);
        if last_msg_id.is_some() {
            return Err(ApiError::atomic_publish_unsupported_header(js_header::EXPECTED_LAST_MSG_ID));
        }
        check_expected(config, &*ingest.store, message, index == 0, subjects.contains(message.subject.as_str()))?;
        subjects.insert(message.subject.as_str());
        if let Some(msg_id) = msg_id {
            if !ids.insert(msg_id) || ingest.knows_msg_id(msg_id) {
                return Err(ApiError::atomic_publish_duplicate(None));
            }
        }
        if let Some(schema) = ingest.schema.as_deref_mut() {
            schema.check(&message.payload)?;
        }
    }
    if config.exactly_once() {
        let mut claims = Vec::with_capacity(messages.len());
        for message in messages {
            claims.extend(producers::claim(message.headers.as_deref())?);
        }
        ingest.producers.check_all(claims.into_iter())?;
    }
    check_discard_new(config, ingest.store, messages.len() as u64, bytes)
}

/// A batch message's `Nats-Expected-*` headers, checked against the store as the batch's first
/// append will find it. Only the first message may expect the stream's last sequence, and an
/// expectation on a subject the batch already wrote could not hold (`first`, `subject_written`).
fn check_expected(
    config: &StreamConfig,
    store: &dyn StreamStore,
    message: &Inbound,
    first: bool,
    subject_written: bool,
) -> Result<(), ApiError> {
    let names =
        [js_header::EXPECTED_STREAM, js_header::EXPECTED_LAST_SEQUENCE, js_header::EXPECTED_LAST_SUBJECT_SEQUENCE];
    let [stream, last_seq, last_subject_seq] =
        Headers::new(message.headers.as_deref().unwrap_or_default()).get_many(&names);
    if (last_seq.is_some() && !first) || (last_subject_seq.is_some() && subject_written) {
        return Err(ApiError::wrong_last_sequence_constant());
    }
    if stream.is_some_and(|expected| expected != config.name) {
        return Err(ApiError::expected_stream_mismatch());
    }
    if let Some(expected) = last_seq {
        let last = store.state().last_seq;
        if expected.parse::<u64>().ok() != Some(last) {
            return Err(ApiError::wrong_last_sequence(last));
        }
    }
    if let Some(expected) = last_subject_seq {
        let last = store.get_last_for_subject(&message.subject).map_err(store_error)?.map_or(0, |m| m.seq);
        if expected.parse::<u64>().ok() != Some(last) {
            return Err(ApiError::wrong_last_sequence(last));
        }
    }
    Ok(())
}

/// With `discard: new`, a batch that would not fit is refused whole.
fn check_discard_new(config: &StreamConfig, store: &dyn StreamStore, count: u64, bytes: u64) -> Result<(), ApiError> {
    if config.discard != Discard::New {
        return Ok(());
    }
    let state = store.state();
    if config.max_msgs > 0 && state.msgs + count > config.max_msgs as u64 {
        return Err(ApiError::max_messages());
    }
    if config.max_bytes > 0 && state.bytes + bytes > config.max_bytes as u64 {
        return Err(ApiError::max_bytes());
    }
    Ok(())
}

/// Appends every message through the stream's own per-message path; on the first refusal,
/// deletes what was appended and undoes the producer, dedup and chain records. Returns the last
/// sequence.
fn append_all(stream: &Stream, ingest: &mut Ingest<'_, '_>, messages: Vec<Inbound>) -> Result<u64, ApiError> {
    let undo_dedup = ingest.dedup_mark();
    let undo_chain = ingest.chain.as_deref().map(|chain| chain.mark());
    ingest.producers.begin_batch(ingest.store.state().last_seq);
    ingest.deferred_deletes = Some(Vec::new());
    // Nothing is held while the batch's messages go in (a rollup's purge, a limit's eviction
    // find the snapshot written before the batch, or are refused if that failed): a rollback
    // must leave nothing behind (`stream/split.rs`).
    let held = ingest.held.take();
    let mut appended = Vec::with_capacity(messages.len());
    let mut failure = None;
    for mut message in messages {
        if let Err(error) = failpoint_before_append(appended.len() + 1) {
            failure = Some(error);
            break;
        }
        let last_before = ingest.store.state().last_seq;
        match stream.ingest_one(ingest, &mut message, true) {
            Ok((seq, false)) => appended.push(seq),
            Ok((_, true)) => failure = Some(ApiError::atomic_publish_duplicate(None)),
            Err(error) => {
                // Refused once stored (a rollup whose purge needs a producer snapshot that could
                // not be written): it goes with the rest, the batch's tail in one piece.
                let last_seq = ingest.store.state().last_seq;
                if last_seq > last_before {
                    appended.push(last_seq);
                }
                failure = Some(error);
            }
        }
        if failure.is_some() {
            break;
        }
        failpoint_after_append(ingest.store, appended.len());
    }
    let deferred = ingest.deferred_deletes.take().unwrap_or_default();
    ingest.held = held;
    let Some(error) = failure else {
        ingest.producers.commit_batch();
        for seq in deferred {
            if let Err(error) = ingest.drop_unwanted(seq) {
                // The batch is stored either way; the message stays, as if someone wanted it.
                tracing::error!(stream = %stream.name, seq, %error, "cannot drop a batch message no consumer wants");
            }
        }
        return Ok(appended.last().copied().unwrap_or_default());
    };
    remove_refused(stream, ingest.store, &appended);
    ingest.producers.rollback_batch();
    ingest.dedup_rollback(undo_dedup);
    if let (Some(chain), Some(mark)) = (ingest.chain.as_deref_mut(), undo_chain) {
        chain.rollback(mark, &*ingest.store);
    }
    Err(error)
}

/// Removes a refused batch's appended messages. When they are the stream's tail, one after
/// another, the store removes them at once with no fsync (a rollback marker the next commit
/// makes durable before anything appended later); otherwise one by one, oldest first, each
/// synced: if this is cut short, the batch's last message is still there, without a commit
/// marker, and start-up removes the rest.
fn remove_refused(stream: &Stream, store: &mut dyn StreamStore, appended: &[u64]) {
    let (Some(&first), Some(&last)) = (appended.first(), appended.last()) else { return };
    let contiguous = last - first + 1 == appended.len() as u64;
    let result = if contiguous && store.state().last_seq == last {
        store.remove_refused(first, last).map(drop)
    } else {
        appended.iter().try_for_each(|&seq| store.delete(seq).map(drop))
    };
    if let Err(error) = result {
        // The batch has no commit marker: start-up removes what is left of it if it is still
        // the tail (on L4 the chain shows a break at what is left until then).
        tracing::error!(stream = %stream.name, first, last, %error, "cannot remove a refused batch's messages");
    }
}

/// The test-only store refusal of a batch's `nth` message.
fn failpoint_before_append(nth: usize) -> Result<(), ApiError> {
    if failpoint::get() == Some(&Failpoint::StoreError(nth)) {
        return Err(ApiError::storage(format!("{FAILPOINT_ENV}: the store refuses message {nth} of the batch")));
    }
    Ok(())
}

/// The test-only crash after a batch's `appended`-th append.
fn failpoint_after_append(store: &mut dyn StreamStore, appended: usize) {
    if failpoint::get() == Some(&Failpoint::ExitAfterAppend(appended)) {
        let _ = store.flush();
        tracing::warn!("{FAILPOINT_ENV}: exiting after appending message {appended} of a batch");
        std::process::exit(86);
    }
}

/// Removes an atomic batch cut short by a crash from the end of the stream: messages carrying
/// one `Nats-Batch-Id` and no `Nats-Batch-Commit` at the tail, back to the batch's first. Only
/// the tail can hold one (one task appends, a batch at a time). Returns how many were removed.
pub fn remove_incomplete_tail(store: &mut dyn StreamStore) -> u64 {
    let state = store.state();
    // A batch cut short ends at the last sequence ever assigned, and that message is there (a
    // batch drops nothing until all of it is in, and a refused one is removed oldest first).
    // Otherwise the last message was removed since: whatever precedes it was complete.
    if !matches!(store.get(state.last_seq), Ok(Some(_))) {
        return 0;
    }
    let lowest = state.first_seq.max(state.last_seq.saturating_sub(limits::ATOMIC_BATCH_TAIL_SCAN_MESSAGES_MAX));
    let mut tail: Option<String> = None;
    let mut doomed = Vec::new();
    for seq in (lowest..=state.last_seq).rev() {
        let Ok(Some(message)) = store.get(seq) else { continue };
        let block = message.headers.as_deref().unwrap_or_default();
        let [id, commit, batch_seq] =
            Headers::new(block).get_many(&[header::BATCH_ID, header::BATCH_COMMIT, header::BATCH_SEQUENCE]);
        let (Some(id), None) = (id.filter(|id| !id.is_empty()), commit) else { break };
        if tail.get_or_insert_with(|| id.to_string()) != id {
            break;
        }
        doomed.push(seq);
        if batch_seq == Some("1") {
            break;
        }
    }
    // `doomed` runs from the tail down, and what lies between its ends that is still there is
    // the batch's: one rollback, made durable by the next commit (a crash before it leaves the
    // same tail for the next start-up).
    let removed = match (doomed.last(), doomed.first()) {
        (Some(&first), Some(&last)) => store.remove_refused(first, last).unwrap_or_else(|error| {
            tracing::error!(first, last, %error, "cannot remove an uncommitted batch");
            0
        }),
        _ => 0,
    };
    if let Some(id) = tail.filter(|_| removed > 0) {
        tracing::warn!(batch = %id, removed, "removed an atomic batch a crash left uncommitted");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(headers: &[(&str, &str)], reply: Option<&str>) -> Inbound {
        let lines: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
        Inbound {
            subject: "orders.new".into(),
            reply: reply.map(str::to_string),
            headers: Some(Bytes::from(format!("NATS/1.0\r\n{lines}\r\n"))),
            payload: Bytes::from_static(b"{}"),
            publisher: Some(1),
            received: std::time::Instant::now(),
            trace: None,
            internal: false,
        }
    }

    fn atomic() -> StreamConfig {
        StreamConfig { allow_atomic: true, ..StreamConfig::default() }
    }

    fn refused_code(route: Route) -> u32 {
        match route {
            Route::Refused(_, error) => error.err_code,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_batch_is_staged_then_committed_whole() {
        let mut batches = Batches::default();
        let now = Instant::now();
        let first = message(&[(header::BATCH_ID, "b1"), (header::BATCH_SEQUENCE, "1")], Some("r1"));
        assert!(matches!(batches.route(&atomic(), first, now), Route::Staged));
        assert_eq!(batches.replies.len(), 1, "a staged message gets an empty reply");
        let last =
            message(&[(header::BATCH_ID, "b1"), (header::BATCH_SEQUENCE, "2"), (header::BATCH_COMMIT, "1")], None);
        let Route::Commit(commit) = batches.route(&atomic(), last, now) else { panic!("commit") };
        assert_eq!((commit.id.as_str(), commit.messages.len()), ("b1", 2));
        assert_eq!((batches.open_count(), batches.staged_bytes), (0, 0));
    }

    #[test]
    fn an_eob_commit_is_not_stored_and_the_last_message_gets_the_marker() {
        let mut batches = Batches::default();
        let now = Instant::now();
        batches.route(&atomic(), message(&[(header::BATCH_ID, "b"), (header::BATCH_SEQUENCE, "1")], None), now);
        let eob =
            message(&[(header::BATCH_ID, "b"), (header::BATCH_SEQUENCE, "2"), (header::BATCH_COMMIT, "eob")], None);
        let Route::Commit(mut commit) = batches.route(&atomic(), eob, now) else { panic!("commit") };
        assert_eq!(commit.messages.len(), 1);
        mark_committed(&mut commit.messages[0]);
        let block = commit.messages[0].headers.clone().unwrap();
        assert_eq!(Headers::new(&block).get(header::BATCH_COMMIT), Some("1"));
        assert_eq!(Headers::new(&block).get(header::BATCH_SEQUENCE), Some("1"));
    }

    #[test]
    fn batches_are_refused_as_nats_server_refuses_them() {
        let now = Instant::now();
        let start = |id: &str| message(&[(header::BATCH_ID, id), (header::BATCH_SEQUENCE, "1")], None);
        let disabled = Batches::default().route(&StreamConfig::default(), start("b"), now);
        assert_eq!(refused_code(disabled), 10174);
        let long_id = "x".repeat(65);
        assert_eq!(refused_code(Batches::default().route(&atomic(), start(&long_id), now)), 10179);
        let no_seq = message(&[(header::BATCH_ID, "b")], None);
        assert_eq!(refused_code(Batches::default().route(&atomic(), no_seq, now)), 10175);
        let unknown = message(&[(header::BATCH_ID, "b"), (header::BATCH_SEQUENCE, "2")], None);
        assert_eq!(refused_code(Batches::default().route(&atomic(), unknown, now)), 10176);
        let huge = message(&[(header::BATCH_ID, "b"), (header::BATCH_SEQUENCE, "1001")], None);
        assert_eq!(refused_code(Batches::default().route(&atomic(), huge, now)), 10199);

        let mut batches = Batches::default();
        batches.route(&atomic(), start("g"), now);
        let gap = message(&[(header::BATCH_ID, "g"), (header::BATCH_SEQUENCE, "3")], None);
        assert_eq!(refused_code(batches.route(&atomic(), gap, now)), 10176);
        assert_eq!(batches.open_count(), 0, "a gap abandons the batch");
        batches.route(&atomic(), start("c"), now);
        let bad_commit =
            message(&[(header::BATCH_ID, "c"), (header::BATCH_SEQUENCE, "2"), (header::BATCH_COMMIT, "x")], None);
        assert_eq!(refused_code(batches.route(&atomic(), bad_commit, now)), 10200);
        assert_eq!(batches.open_count(), 0);
        let after_gap = message(&[(header::BATCH_ID, "g"), (header::BATCH_SEQUENCE, "4")], None);
        assert_eq!(refused_code(batches.route(&atomic(), after_gap, now)), 10176);
        assert_eq!(
            batches.abandoned,
            [("g".to_string(), Abandon::Incomplete), ("c".to_string(), Abandon::Incomplete)],
            "one advisory per abandoned batch, none for a batch that is not open"
        );
    }

    #[test]
    fn abandoned_batches_say_why() {
        let mut batches = Batches::default();
        let now = Instant::now();
        let at = |id: &str, seq: &str| message(&[(header::BATCH_ID, id), (header::BATCH_SEQUENCE, seq)], None);
        for seq in 1..=limits::ATOMIC_BATCH_MESSAGES_MAX {
            assert!(matches!(batches.route(&atomic(), at("big", &seq.to_string()), now), Route::Staged));
        }
        let past_the_end = (limits::ATOMIC_BATCH_MESSAGES_MAX + 1).to_string();
        assert_eq!(refused_code(batches.route(&atomic(), at("big", &past_the_end), now)), 10199);
        batches.route(&atomic(), at("late", "1"), now);
        let later = now + limits::ATOMIC_BATCH_TIMEOUT + Duration::from_millis(1);
        assert_eq!(refused_code(batches.route(&atomic(), at("late", "2"), later)), 10176);
        batches.route(&atomic(), at("idle", "1"), now);
        batches.expire(limits::ATOMIC_BATCH_TIMEOUT, later);
        let reasons: Vec<(&str, &str)> =
            batches.abandoned.iter().map(|(id, why)| (id.as_str(), why.reason())).collect();
        assert_eq!(reasons, [("big", "large"), ("late", "timeout"), ("idle", "timeout")]);
        let advisory: serde_json::Value =
            serde_json::from_slice(&abandoned_advisory("ORDERS", Some("hub"), "idle", Abandon::Timeout)).unwrap();
        assert_eq!(advisory["type"], ABANDONED_ADVISORY_TYPE);
        assert_eq!((advisory["stream"].as_str(), advisory["batch"].as_str()), (Some("ORDERS"), Some("idle")));
        assert_eq!((advisory["reason"].as_str(), advisory["domain"].as_str()), (Some("timeout"), Some("hub")));
        assert_eq!(advisory["id"].as_str().map(str::len), Some(22));
        assert!(advisory["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{advisory}");
    }

    #[test]
    fn open_batches_are_bounded_per_connection_and_expire() {
        let mut batches = Batches::default();
        let now = Instant::now();
        for n in 0..limits::ATOMIC_BATCHES_PER_CONNECTION_MAX {
            let id = format!("b{n}");
            let first = message(&[(header::BATCH_ID, &id), (header::BATCH_SEQUENCE, "1")], None);
            assert!(matches!(batches.route(&atomic(), first, now), Route::Staged));
        }
        let one_more = message(&[(header::BATCH_ID, "extra"), (header::BATCH_SEQUENCE, "1")], None);
        assert_eq!(refused_code(batches.route(&atomic(), one_more, now)), 10210);
        let later = now + limits::ATOMIC_BATCH_TIMEOUT + Duration::from_millis(1);
        assert_eq!(batches.expire(limits::ATOMIC_BATCH_TIMEOUT, later), limits::ATOMIC_BATCHES_PER_CONNECTION_MAX);
        assert_eq!(batches.staged_bytes, 0);
    }
}
