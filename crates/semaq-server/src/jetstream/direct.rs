//! `$JS.API.DIRECT.GET.<stream>[.<subject>]`, as nats-server 2.11 answers it: the message
//! itself with `Nats-Stream`, `Nats-Subject`, `Nats-Sequence` and `Nats-Time-Stamp` headers
//! (after its own), or a status with no body: `404 Message Not Found`, `408` for a request it
//! cannot read. Batches (`batch`, `max_bytes`) and multi-last (`multi_last`, `up_to_seq`,
//! `up_to_time`) end with `204 EOB` carrying `Nats-Num-Pending` and `Nats-Last-Sequence`.

use semaq_store::{StoredMessage, StreamStore};
use semaq_wire::clock;
use semaq_wire::headers::names;
use serde::Deserialize;

use super::kv::go_rfc3339_nano;
use super::stream::Stream;
use super::{JetStream, Services};
use crate::delivery::Message;
use crate::limits;

/// Body of a direct get (nats-server's `JSApiMsgGetRequest`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DirectRequest {
    seq: u64,
    last_by_subj: String,
    next_by_subj: String,
    batch: usize,
    max_bytes: usize,
    start_time: Option<String>,
    multi_last: Vec<String>,
    up_to_seq: u64,
    up_to_time: Option<String>,
    no_hdr: bool,
}

impl DirectRequest {
    /// The `408 Bad Request` combinations nats-server refuses.
    fn conflicting(&self) -> bool {
        let (seq, last, next) = (self.seq > 0, !self.last_by_subj.is_empty(), !self.next_by_subj.is_empty());
        let (start, multi) = (self.start_time.is_some(), !self.multi_last.is_empty());
        let batch = self.batch > 0;
        let up_to = (self.up_to_seq > 0, self.up_to_time.is_some());
        let pairs = [
            (seq, last),
            (seq, start),
            (start, last),
            (last, next),
            (last, batch),
            (last, multi),
            (next, multi),
            up_to,
        ];
        pairs.iter().any(|(a, b)| *a && *b)
    }
}

/// Where a direct get's answers go.
struct Reply<'a> {
    services: &'a Services,
    subject: &'a str,
}

impl Reply<'_> {
    fn status(&self, code: u16, text: &str) {
        let headers = format!("NATS/1.0 {code} {text}\r\n\r\n");
        self.services.bus.publish(self.subject, Some(headers.as_bytes()), b"");
    }

    fn send(&self, headers: Option<&str>, payload: &[u8]) {
        let message = Message {
            subject: self.subject,
            reply: None,
            headers: headers.map(str::as_bytes),
            payload,
            publisher: None,
        };
        self.services.bus.publish_as(self.subject, &message);
    }
}

/// Answers one direct get; `subject` is the tokens after the stream name (empty for the
/// JSON-body form).
pub fn get(services: &Services, jetstream: &JetStream, reply: &str, stream: &str, subject: &[&str], payload: &[u8]) {
    let reply = Reply { services, subject: reply };
    let Some(stream) = jetstream.stream(stream).filter(|s| s.config().allow_direct) else {
        // nats-server has no responder then: the client sees "no responders".
        return reply.status(503, "");
    };
    let body = payload.trim_ascii();
    let request = if subject.is_empty() {
        if body.is_empty() {
            return reply.status(408, "Empty Request");
        }
        let Ok(request) = serde_json::from_slice::<DirectRequest>(body) else {
            return reply.status(408, "Malformed Request");
        };
        let nothing_set = request.seq == 0
            && request.last_by_subj.is_empty()
            && request.next_by_subj.is_empty()
            && request.multi_last.is_empty()
            && request.start_time.is_none();
        if nothing_set {
            return reply.status(408, "Empty Request");
        }
        if request.conflicting() {
            return reply.status(408, "Bad Request");
        }
        request
    } else {
        let mut request = DirectRequest::default();
        if !body.is_empty() {
            let Ok(parsed) = serde_json::from_slice::<DirectRequest>(body) else {
                return reply.status(408, "Malformed Request");
            };
            request = parsed;
        }
        // The subject form takes nothing but `no_hdr` in its body.
        let extra = !request.last_by_subj.is_empty()
            || !request.next_by_subj.is_empty()
            || !request.multi_last.is_empty()
            || request.seq != 0
            || request.batch != 0
            || request.start_time.is_some()
            || request.up_to_seq != 0
            || request.up_to_time.is_some();
        if extra {
            return reply.status(408, "Bad Request");
        }
        request.last_by_subj = subject.join(".");
        request
    };
    if request.multi_last.is_empty() {
        single_or_batch(&stream, &request, &reply);
    } else {
        multi_last(&stream, &request, &reply);
    }
}

/// The headers a direct get answers with: the message's own, then nats-server's.
fn headers_for(stream: &Stream, message: &StoredMessage, batch: Option<(u64, u64)>) -> String {
    let existing =
        message.headers.as_deref().map(|block| String::from_utf8_lossy(block).trim_end_matches("\r\n").to_string());
    let mut headers = existing.filter(|text| !text.is_empty()).unwrap_or_else(|| "NATS/1.0".to_string()) + "\r\n";
    let time = go_rfc3339_nano(message.timestamp_ns);
    let mut push = |name: &str, value: &str| {
        headers.push_str(name);
        headers.push_str(": ");
        headers.push_str(value);
        headers.push_str("\r\n");
    };
    push(names::STREAM, &stream.name);
    push(names::SUBJECT, &message.subject);
    push(names::SEQUENCE, &message.seq.to_string());
    push(names::TIME_STAMP, &time);
    if let Some((pending, last)) = batch {
        push(names::NUM_PENDING, &pending.to_string());
        push(names::LAST_SEQUENCE, &last.to_string());
    }
    headers.push_str("\r\n");
    headers
}

/// Sends one found message (`batch`: its pending count and the previous sequence).
fn send_message(
    stream: &Stream,
    reply: &Reply<'_>,
    no_hdr: bool,
    mut message: StoredMessage,
    batch: Option<(u64, u64)>,
) {
    if let Some(provenance) = stream.provenance() {
        message.headers = provenance.annotate(message.seq, message.headers.take());
    }
    if no_hdr {
        reply.send(None, &message.payload);
    } else {
        reply.send(Some(&headers_for(stream, &message, batch)), &message.payload);
    }
}

/// The bytes a message counts for against `max_bytes`, as nats-server counts them.
fn counted_bytes(message: &StoredMessage) -> usize {
    message.subject.len() + message.headers.as_ref().map_or(0, |h| h.len()) + message.payload.len()
}

/// The first sequence stored at or after `text` (RFC 3339); `None` when unreadable.
fn seq_from_time(store: &dyn StreamStore, text: &str) -> Option<u64> {
    let start_ns = clock::parse_rfc3339(text)?;
    let state = store.state();
    let (mut low, mut high) = (state.first_seq.max(1), state.last_seq + 1);
    while low < high {
        let middle = low + (high - low) / 2;
        match store.get_next(middle, None) {
            Ok(Some(message)) if message.timestamp_ns < start_ns => low = message.seq + 1,
            _ => high = middle,
        }
    }
    Some(low)
}

fn single_or_batch(stream: &Stream, request: &DirectRequest, reply: &Reply<'_>) {
    let store = stream.store();
    let mut seq = request.seq;
    if let Some(text) = &request.start_time {
        let Some(found) = seq_from_time(store.as_ref(), text) else { return reply.status(408, "Bad Request") };
        seq = found;
    }
    let filter = (!request.next_by_subj.is_empty()).then_some(request.next_by_subj.as_str());
    let is_batch = request.batch > 0;
    // Past the scan bound the count is the sequences left, as for an unfiltered stream.
    let count = || store.count_matching(seq..u64::MAX, filter, limits::PENDING_SCAN_SEQS_MAX);
    let sequences_left = || store.state().last_seq.saturating_sub(seq.saturating_sub(1));
    let mut pending = if is_batch { count().unwrap_or_else(sequences_left) } else { 0 };
    let max_bytes = if request.max_bytes > 0 { request.max_bytes } else { limits::DIRECT_GET_BATCH_BYTES_DEFAULT };
    let (mut last, mut sent_bytes) = (0, 0);
    let mut found = Vec::new();
    for i in 0..request.batch.max(1) {
        let message = if filter.is_some() || (is_batch && seq > 0) || (i > 0) {
            store.get_next(seq, filter)
        } else if seq > 0 {
            store.get(seq)
        } else {
            store.get_last_for_subject(&request.last_by_subj)
        };
        let Ok(Some(message)) = message else {
            if i > 0 {
                break;
            }
            drop(store);
            return reply.status(404, "Message Not Found");
        };
        seq = message.seq + 1;
        pending = pending.saturating_sub(1);
        let batch = is_batch.then_some((pending, last));
        last = message.seq;
        sent_bytes += counted_bytes(&message);
        found.push((message, batch));
        if sent_bytes >= max_bytes {
            break;
        }
    }
    drop(store);
    for (message, batch) in found {
        send_message(stream, reply, request.no_hdr, message, batch);
    }
    if is_batch {
        let headers = format!(
            "NATS/1.0 204 EOB\r\n{}: {pending}\r\n{}: {last}\r\n\r\n",
            names::NUM_PENDING,
            names::LAST_SEQUENCE
        );
        reply.send(Some(&headers), b"");
    }
}

fn multi_last(stream: &Stream, request: &DirectRequest, reply: &Reply<'_>) {
    let store = stream.store();
    let state = store.state();
    let mut up_to = request.up_to_seq;
    if let Some(text) = &request.up_to_time {
        let Some(found) = seq_from_time(store.as_ref(), text) else { return reply.status(408, "Bad Request") };
        if found <= state.first_seq {
            drop(store);
            return reply.status(404, "No Results");
        }
        up_to = found - 1;
    }
    if up_to == 0 {
        up_to = state.last_seq;
    }
    let mut seqs = std::collections::BTreeSet::new();
    for filter in &request.multi_last {
        for subject in store.subjects_state(Some(filter.as_str())).keys() {
            if let Some(seq) = last_at_or_below(store.as_ref(), subject, up_to) {
                seqs.insert(seq);
            }
            if seqs.len() > limits::DIRECT_GET_MULTI_LAST_MAX {
                drop(store);
                return reply.status(413, "Too Many Results");
            }
        }
    }
    if seqs.is_empty() {
        drop(store);
        return reply.status(404, "No Results");
    }
    let max_bytes = if request.max_bytes > 0 { request.max_bytes } else { limits::DIRECT_GET_BATCH_BYTES_DEFAULT };
    let mut pending = seqs.len() as u64;
    let (mut last, mut sent_bytes, mut sent) = (0, 0, 0);
    let mut found = Vec::new();
    for seq in seqs {
        pending = pending.saturating_sub(1);
        if seq < request.seq {
            continue;
        }
        let Ok(Some(message)) = store.get(seq) else {
            drop(store);
            return reply.status(404, "Message Not Found");
        };
        let batch = Some((pending, last));
        last = message.seq;
        sent_bytes += counted_bytes(&message);
        found.push((message, batch));
        sent += 1;
        if sent_bytes >= max_bytes || (request.batch > 0 && sent >= request.batch) {
            break;
        }
    }
    drop(store);
    for (message, batch) in found {
        send_message(stream, reply, request.no_hdr, message, batch);
    }
    let headers = format!(
        "NATS/1.0 204 EOB\r\n{}: {pending}\r\n{}: {last}\r\n{}: {up_to}\r\n\r\n",
        names::NUM_PENDING,
        names::LAST_SEQUENCE,
        names::UP_TO_SEQUENCE
    );
    reply.send(Some(&headers), b"");
}

/// The newest message on the literal `subject` with sequence at most `up_to`.
fn last_at_or_below(store: &dyn StreamStore, subject: &str, up_to: u64) -> Option<u64> {
    let last = store.get_last_for_subject(subject).ok().flatten()?;
    if last.seq <= up_to {
        return Some(last.seq);
    }
    // Older messages of the subject: walk forward from the start (bounded by the subject's count).
    let mut best = None;
    let mut next = 0;
    while let Ok(Some(message)) = store.get_next(next, Some(subject)) {
        if message.seq > up_to {
            break;
        }
        best = Some(message.seq);
        next = message.seq + 1;
    }
    best
}
