//! The consumer's task: it wakes on new messages, acks, pull requests and timers, and hands
//! messages to waiting pull requests or to the push subject.
//!
//! Each round computes what to send while holding the consumer's state, then publishes after
//! releasing it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use semaq_wire::headers::names;
use serde::Deserialize;
use tokio::sync::watch;

use super::ahead::{self, priority_of_message};
use super::state::{next_matching, Pending, PullRequest, State};
use super::{redelivery_deadline, Consumer};
use crate::bus::Bus;
use crate::delivery::{FlushSet, Message};
use crate::jetstream::config::{AckPolicy, ConsumerConfig};
use crate::jetstream::stream::Stream;
use crate::limits;
use crate::sync::lock;

/// The body of `CONSUMER.MSG.NEXT`: a JSON request, a bare batch number, or empty (one message).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct PullRequestBody {
    /// Messages wanted.
    pub batch: u64,
    /// Nanoseconds until the request expires.
    pub expires: i64,
    /// Answer at once when nothing is available.
    pub no_wait: bool,
    /// Bytes wanted at most.
    pub max_bytes: u64,
    /// Nanoseconds between idle heartbeats.
    pub idle_heartbeat: i64,
    /// Priority group fields (nats-server 2.11).
    #[serde(flatten)]
    pub group: super::groups::PullGroup,
}

impl PullRequestBody {
    /// Parses a request body.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(body).map_err(|e| e.to_string())?.trim();
        if text.is_empty() {
            return Ok(Self { batch: 1, ..Self::default() });
        }
        if let Ok(batch) = text.parse::<u64>() {
            return Ok(Self { batch, ..Self::default() });
        }
        let mut request: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if request.batch == 0 {
            request.batch = 1;
        }
        Ok(request)
    }
}

/// What one pump round has delivered. A round stops at `PUMP_MESSAGES_MAX` or `PUMP_BYTES_MAX`
/// and wakes its task to go on once it is published: the consumer's lock is let go between
/// rounds, and the messages read for one round (a flow-control window of large Object Store
/// chunks) stay few enough to be published from memory the allocator has just freed.
#[derive(Debug, Default)]
struct Round {
    messages: usize,
    bytes: usize,
}

impl Round {
    fn is_full(&self) -> bool {
        self.messages >= limits::PUMP_MESSAGES_MAX || self.bytes >= limits::PUMP_BYTES_MAX
    }

    fn count(&mut self, delivery: &Outgoing) {
        self.messages += 1;
        self.bytes += delivery.headers.as_ref().map_or(0, Bytes::len) + delivery.payload.len();
    }
}

/// One message or status to publish once the state lock is released.
#[derive(Debug)]
struct Outgoing {
    route: String,
    subject: String,
    reply: Option<String>,
    headers: Option<Bytes>,
    payload: Bytes,
    /// A first delivery's store time (unix ns), for the end-to-end latency.
    stored_ns: Option<i64>,
    /// The delivery's trace span, ended once the message is handed on.
    _span: Option<crate::trace::span::Span>,
}

impl Outgoing {
    fn status(route: &str, headers: String) -> Self {
        Outgoing {
            route: route.to_string(),
            subject: route.to_string(),
            reply: None,
            headers: Some(Bytes::from(headers)),
            payload: Bytes::new(),
            stored_ns: None,
            _span: None,
        }
    }
}

fn status_line(code: u16, text: &str, extra: &[(&str, u64)]) -> String {
    let mut headers = format!("NATS/1.0 {code} {text}\r\n");
    for (name, value) in extra {
        headers.push_str(&format!("{name}: {value}\r\n"));
    }
    headers.push_str("\r\n");
    headers
}

fn pending_headers(request: &PullRequest) -> [(&'static str, u64); 2] {
    [(names::PENDING_MESSAGES, request.batch_remaining), (names::PENDING_BYTES, request.bytes_remaining.unwrap_or(0))]
}

impl Consumer {
    /// Queues a pull request (`CONSUMER.MSG.NEXT` or `+NXT`), or answers it at once with a status.
    pub fn request_next(&self, reply: &str, body: &[u8]) {
        let bus = &self.services.bus;
        let config = self.config();
        let reject = |code: u16, text: String| {
            bus.publish(reply, Some(status_line(code, &text, &[]).as_bytes()), b"");
        };
        if config.deliver_subject.is_some() {
            return reject(409, "Consumer is push based".into());
        }
        let request = match PullRequestBody::parse(body) {
            Ok(request) => request,
            Err(error) => return reject(400, format!("Bad Request - {error}")),
        };
        if config.max_batch > 0 && request.batch > config.max_batch as u64 {
            return reject(409, format!("Exceeded MaxRequestBatch of {}", config.max_batch));
        }
        if config.max_expires > 0 && request.expires > config.max_expires {
            return reject(409, format!("Exceeded MaxRequestExpires of {}ms", config.max_expires / 1_000_000));
        }
        if config.max_bytes > 0 && request.max_bytes > config.max_bytes as u64 {
            return reject(409, format!("Exceeded MaxRequestMaxBytes of {}", config.max_bytes));
        }
        let now = Instant::now();
        if let Err((code, text)) = self.check_group(&config, &request.group, now) {
            return reject(code, text);
        }
        let heartbeat = (request.idle_heartbeat > 0).then(|| Duration::from_nanos(request.idle_heartbeat as u64));
        let waiting = PullRequest {
            reply: reply.to_string(),
            batch_remaining: request.batch.min(limits::PULL_BATCH_MESSAGES_MAX),
            bytes_remaining: (request.max_bytes > 0).then_some(request.max_bytes),
            expires: (request.expires > 0).then(|| now + Duration::from_nanos(request.expires as u64)),
            no_wait: request.no_wait,
            heartbeat,
            next_heartbeat: heartbeat.map(|every| now + every),
            delivered: 0,
            group: request.group,
        };
        {
            let mut state = lock(&self.state);
            state.last_activity = Some(now);
            if state.waiting.len() as i64 >= config.max_waiting.max(1) {
                drop(state);
                return reject(409, "Exceeded MaxWaiting".into());
            }
            state.waiting.push_back(waiting);
        }
        self.wake();
    }
}

/// Runs the consumer until it is stopped or its stream goes away.
pub async fn run(consumer: Arc<Consumer>, mut last_seq: watch::Receiver<u64>) {
    let mut save_timer = tokio::time::interval(limits::CONSUMER_STATE_SAVE_INTERVAL);
    loop {
        if consumer.is_stopped() {
            break;
        }
        let Some(stream) = consumer.stream() else { break };
        let bus = &consumer.services.bus;
        consumer.confirm_saved(bus);
        let next_wake = consumer.pump(&stream, bus);
        if consumer.inactive_too_long() {
            tracing::debug!(consumer = %consumer.name, "removing inactive ephemeral consumer");
            stream.remove_consumer(&consumer.name);
            break;
        }
        drop(stream);
        let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(next_wake));
        tokio::select! {
            _ = consumer.wake.notified() => {}
            changed = last_seq.changed() => if changed.is_err() { break },
            _ = sleep => {}
            _ = save_timer.tick() => tokio::task::block_in_place(|| consumer.save_state()),
        }
    }
    consumer.save_state();
}

impl Consumer {
    /// A push subscriber answered flow-control request `id`: what was delivered before it is
    /// confirmed, the window grows, and delivery resumes. Answers to older requests are ignored.
    pub fn flow_control_response(&self, id: u64) {
        let mut state = lock(&self.state);
        if state.flow_control_outstanding != Some(id) {
            return;
        }
        state.flow_control_outstanding = None;
        state.flow_control_window_bytes =
            (state.flow_control_window_bytes * 2).min(limits::FLOW_CONTROL_WINDOW_MAX_BYTES);
        state.flow_control_pending_bytes =
            state.flow_control_pending_bytes.saturating_sub(std::mem::take(&mut state.flow_control_request_bytes));
        drop(state);
        self.wake();
    }

    fn inactive_too_long(&self) -> bool {
        if self.durable {
            return false;
        }
        let config = self.config();
        let threshold = if config.inactive_threshold > 0 {
            Duration::from_nanos(config.inactive_threshold as u64)
        } else {
            limits::EPHEMERAL_INACTIVE_THRESHOLD
        };
        let state = lock(&self.state);
        state.waiting.is_empty() && !state.push_bound && state.last_activity.is_some_and(|at| at.elapsed() > threshold)
    }

    /// One round of deliveries; returns when the task should look again at the latest.
    fn pump(&self, stream: &Stream, bus: &Bus) -> Instant {
        let config = self.config();
        let now = Instant::now();
        let mut outgoing = Vec::new();
        let (next_wake, skipped) = {
            let mut state = lock(&self.state);
            self.expire_requests(&mut state, now, &mut outgoing);
            collect_due(&mut state, &config, now);
            if let Some(deliver) = &config.deliver_subject {
                let bound = !bus.router.matches(deliver).is_empty();
                state.push_bound = bound;
                if bound && !super::pause::is_paused(&config) {
                    state.last_activity = Some(now);
                    self.deliver_push(&mut state, &config, stream, deliver, now, &mut outgoing);
                }
            } else {
                self.deliver_pull(&mut state, &config, stream, now, &mut outgoing);
            }
            state.in_transit += outgoing.len() as u64;
            (next_wake(&state, &config, now), std::mem::take(&mut state.skipped))
        };
        let in_transit = outgoing.len() as u64;
        // Messages the content filter skipped count as acknowledged (interest, workqueue).
        stream.acknowledged(&skipped);
        self.record_latency(&outgoing);
        let mut flush = FlushSet::default();
        for message in outgoing {
            let message_view = Message {
                subject: &message.subject,
                reply: message.reply.as_deref(),
                headers: message.headers.as_deref(),
                payload: &message.payload,
                publisher: None,
            };
            bus.publish_batched(&message.route, &message_view, &mut flush);
        }
        flush.flush();
        let mut state = lock(&self.state);
        state.in_transit = state.in_transit.saturating_sub(in_transit);
        if state.in_transit == 0 && in_transit > 0 {
            self.handed_off.notify_all();
        }
        drop(state);
        next_wake
    }

    /// Records the end-to-end latency of this round's first deliveries.
    fn record_latency(&self, outgoing: &[Outgoing]) {
        let now_ns = semaq_wire::clock::unix_nanos_now();
        let latencies: Vec<(&str, u64)> = outgoing
            .iter()
            .filter_map(|m| {
                m.stored_ns.map(|at| (m.subject.as_str(), (now_ns.saturating_sub(at).max(0) / 1_000) as u64))
            })
            .collect();
        self.services.latency.record(&self.stream_name, &latencies);
    }

    fn expire_requests(&self, state: &mut State, now: Instant, outgoing: &mut Vec<Outgoing>) {
        let mut kept = std::collections::VecDeque::with_capacity(state.waiting.len());
        for mut request in state.waiting.drain(..) {
            if request.expires.is_some_and(|at| at <= now) {
                let headers = status_line(408, "Request Timeout", &pending_headers(&request));
                outgoing.push(Outgoing::status(&request.reply, headers));
                continue;
            }
            if let (Some(due), Some(every)) = (request.next_heartbeat, request.heartbeat) {
                if due <= now {
                    outgoing.push(Outgoing::status(&request.reply, status_line(100, "Idle Heartbeat", &[])));
                    request.next_heartbeat = Some(now + every);
                }
            }
            kept.push_back(request);
        }
        state.waiting = kept;
    }

    fn deliver_pull(
        &self,
        state: &mut State,
        config: &ConsumerConfig,
        stream: &Stream,
        now: Instant,
        outgoing: &mut Vec<Outgoing>,
    ) {
        let mut round = Round::default();
        if super::pause::is_paused(config) {
            return;
        }
        while let Some(index) = self.choose_request(state, config, stream, outgoing) {
            let Some(request) = state.waiting.get(index) else { return };
            if round.is_full() {
                return self.wake();
            }
            let (no_wait, bytes_remaining, reply) = (request.no_wait, request.bytes_remaining, request.reply.clone());
            let pin = request.group.id.clone();
            let Some(next) = self.next_message(state, config, stream) else {
                if no_wait {
                    state.waiting.remove(index);
                    outgoing.push(Outgoing::status(&reply, status_line(404, "No Messages", &[])));
                    continue;
                }
                return;
            };
            // Counted as nats-server counts toward a request's max_bytes: subject, ack reply,
            // headers and payload.
            let size = match bytes_remaining {
                Some(_) => {
                    let framing = next.subject.len() + self.ack_subject(state, (config, stream), &next).len();
                    (framing + next.headers.as_ref().map_or(0, Bytes::len) + next.payload.len()) as u64
                }
                None => 0,
            };
            if bytes_remaining.is_some_and(|left| size > left) {
                next.put_back(state);
                if let Some(request) = state.waiting.remove(index) {
                    let headers = status_line(409, "Message Size Exceeds MaxBytes", &pending_headers(&request));
                    outgoing.push(Outgoing::status(&reply, headers));
                }
                continue;
            }
            let mut delivery = self.record_delivery(state, (config, stream), next, &reply, now);
            if !pin.is_empty() {
                delivery.headers = Some(super::groups::with_pin_header(delivery.headers.take(), &pin));
            }
            round.count(&delivery);
            outgoing.push(delivery);
            let Some(request) = state.waiting.get_mut(index) else { return };
            request.batch_remaining -= 1;
            request.delivered += 1;
            request.bytes_remaining = request.bytes_remaining.map(|left| left.saturating_sub(size));
            request.next_heartbeat = request.heartbeat.map(|every| now + every);
            if request.batch_remaining == 0 || request.bytes_remaining == Some(0) {
                state.waiting.remove(index);
            }
        }
    }

    /// The waiting request the next message goes to, by the priority policy; stale pins are
    /// answered `423 Nats-Wrong-Pin-Id` here.
    fn choose_request(
        &self,
        state: &mut State,
        config: &ConsumerConfig,
        stream: &Stream,
        outgoing: &mut Vec<Outgoing>,
    ) -> Option<usize> {
        // Overflow thresholds need the pending count: computed only when a request has one.
        let counts = if super::groups::needs_counts(config, &state.waiting) {
            let filter = self.content_filter();
            (state.num_pending(stream, config, filter.as_deref()), state.pending.len() as u64)
        } else {
            (0, state.pending.len() as u64)
        };
        let State { waiting, pin, .. } = state;
        let choice = super::groups::eligible(config, waiting, pin, Instant::now(), counts);
        for request in choice.wrong_pin {
            let headers = status_line(423, "Nats-Wrong-Pin-Id", &pending_headers(&request));
            outgoing.push(Outgoing::status(&request.reply, headers));
        }
        choice.index
    }

    fn deliver_push(
        &self,
        state: &mut State,
        config: &ConsumerConfig,
        stream: &Stream,
        deliver: &str,
        now: Instant,
        outgoing: &mut Vec<Outgoing>,
    ) {
        let mut round = Round::default();
        if state.flow_control_window_bytes == 0 {
            state.flow_control_window_bytes = (limits::FLOW_CONTROL_WINDOW_MAX_BYTES / 16).max(1);
        }
        loop {
            if round.is_full() {
                self.wake();
                break;
            }
            if config.flow_control && state.flow_control_pending_bytes > state.flow_control_window_bytes {
                break;
            }
            let Some(next) = self.next_message(state, config, stream) else { break };
            let message = self.record_delivery(state, (config, stream), next, deliver, now);
            // Counted as nats-server counts a delivery against the window.
            let size = message.subject.len()
                + message.reply.as_ref().map_or(0, String::len)
                + message.headers.as_ref().map_or(0, Bytes::len)
                + message.payload.len();
            round.count(&message);
            outgoing.push(message);
            state.last_push = Some(now);
            if config.flow_control {
                self.count_flow_control(state, size as u64, deliver, outgoing);
            }
        }
        let idle_heartbeat = (config.idle_heartbeat > 0).then(|| Duration::from_nanos(config.idle_heartbeat as u64));
        if let Some(every) = idle_heartbeat {
            // As nats-server: the first heartbeat comes one interval after the subscriber is
            // bound, not at once (a client that counts it as a delivery, such as nats-py's KV
            // watch reading an empty bucket, would otherwise miss its "no values" marker).
            let since = *state.last_push.get_or_insert(now);
            if round.messages == 0 && now.duration_since(since) >= every {
                outgoing.push(Outgoing::status(deliver, self.idle_heartbeat(state)));
                state.last_push = Some(now);
            }
        }
    }

    /// Counts a push delivery against the flow-control window; past half the window, asks the
    /// subscriber to confirm what it has received (one request outstanding at a time).
    fn count_flow_control(&self, state: &mut State, size: u64, deliver: &str, outgoing: &mut Vec<Outgoing>) {
        state.flow_control_pending_bytes += size;
        if state.flow_control_outstanding.is_some() {
            if state.flow_control_pending_bytes - state.flow_control_request_bytes >= state.flow_control_window_bytes {
                state.flow_control_request_bytes += size;
            }
            return;
        }
        if state.flow_control_pending_bytes <= state.flow_control_window_bytes / 2 {
            return;
        }
        state.flow_control_count += 1;
        state.flow_control_outstanding = Some(state.flow_control_count);
        state.flow_control_request_bytes = state.flow_control_pending_bytes;
        let mut request = Outgoing::status(deliver, status_line(100, "FlowControl Request", &[]));
        request.reply = Some(self.flow_control_reply(state.flow_control_count));
        outgoing.push(request);
    }

    /// The reply subject of flow-control request `id`.
    fn flow_control_reply(&self, id: u64) -> String {
        format!("$JS.FC.{}.{}.{}", self.stream_name, self.name, id)
    }

    /// A push consumer's idle heartbeat: the last sequences delivered, and the outstanding
    /// flow-control request when delivery waits for it (clients answer it from there when the
    /// request itself was lost).
    fn idle_heartbeat(&self, state: &State) -> String {
        let last =
            [(names::LAST_CONSUMER, state.delivered_consumer_seq), (names::LAST_STREAM, state.delivered_stream_seq)];
        let mut headers = status_line(100, "Idle Heartbeat", &last);
        if let Some(id) = state.flow_control_outstanding {
            headers.truncate(headers.len() - 2);
            headers.push_str(&format!("{}: {}\r\n\r\n", names::CONSUMER_STALLED, self.flow_control_reply(id)));
        }
        headers
    }

    /// The next message to send: a due redelivery, then the initial list, then the stream.
    fn next_message(&self, state: &mut State, config: &ConsumerConfig, stream: &Stream) -> Option<Candidate> {
        let store = stream.store();
        while let Some(seq) = state.redeliveries.pop_first() {
            match store.get(seq) {
                Ok(Some(message)) => return Some(Candidate::from(message, Origin::Redelivery)),
                _ => {
                    state.remove_pending(seq);
                    state.update_ack_floor();
                }
            }
        }
        let capacity_left = config.ack_policy == AckPolicy::None
            || config.max_ack_pending <= 0
            || (state.pending.len() as i64) < config.max_ack_pending;
        if !capacity_left {
            return None;
        }
        let filter = self.content_filter();
        let passes =
            |message: &semaq_store::StoredMessage| filter.as_ref().is_none_or(|f| self.passes_filter(f, message));
        while let Some(seq) = state.initial.pop_front() {
            match store.get(seq) {
                Ok(Some(message)) if passes(&message) => return Some(Candidate::from(message, Origin::Initial)),
                Ok(Some(_)) => skip(state, seq),
                _ => {}
            }
        }
        let ordered = priority_ordered(config, stream);
        if ordered || !state.ahead.is_empty() {
            if ordered {
                self.read_ahead(state, config, (&**store, stream.committed_seq()), &passes);
            }
            return next_ahead(state, &**store);
        }
        loop {
            if state.skipped.len() >= limits::FILTER_SKIP_MESSAGES_MAX {
                // Bounded work under the locks: look again in the next round, at once.
                self.wake();
                return None;
            }
            match next_matching(&**store, state.next_seq, config) {
                // Not committed yet (its fsync runs): delivered once it is, when `last_seq` moves.
                Ok(Some(message)) if message.seq > stream.committed_seq() => return None,
                Ok(Some(message)) => {
                    state.next_seq = message.seq + 1;
                    if passes(&message) {
                        return Some(Candidate::from(message, Origin::Stream));
                    }
                    skip(state, message.seq);
                }
                Ok(None) => {
                    state.next_seq = state.next_seq.max(store.state().last_seq + 1);
                    return None;
                }
                Err(error) => {
                    tracing::error!(consumer = %self.name, %error, "cannot read the stream");
                    return None;
                }
            }
        }
    }

    /// Fills a priority-ordered consumer's read-ahead from the stream, up to its bound.
    fn read_ahead(
        &self,
        state: &mut State,
        config: &ConsumerConfig,
        (store, committed_seq): (&dyn semaq_store::StreamStore, u64),
        passes: &dyn Fn(&semaq_store::StoredMessage) -> bool,
    ) {
        while state.ahead.len() < limits::PRIORITY_READ_AHEAD_MESSAGES_MAX {
            if state.skipped.len() >= limits::FILTER_SKIP_MESSAGES_MAX {
                self.wake();
                return;
            }
            match next_matching(store, state.next_seq, config) {
                // Not committed yet: read once it is.
                Ok(Some(message)) if message.seq > committed_seq => return,
                Ok(Some(message)) => {
                    state.next_seq = message.seq + 1;
                    if state.pending.contains_key(&message.seq) {
                        // Delivered before a restart that resumed below it: pending redelivers it.
                        continue;
                    }
                    if passes(&message) {
                        state.ahead.push(priority_of_message(message.headers.as_deref()), message.seq);
                    } else {
                        skip(state, message.seq);
                    }
                }
                Ok(None) => {
                    state.next_seq = state.next_seq.max(store.state().last_seq + 1);
                    return;
                }
                Err(error) => {
                    tracing::error!(consumer = %self.name, %error, "cannot read the stream");
                    return;
                }
            }
        }
    }

    /// The ack reply subject the next delivery of `message` will carry:
    /// `$JS.ACK.<stream>.<consumer>.<deliveries>.<stream seq>.<consumer seq>.<timestamp>.<pending>`.
    fn ack_subject(
        &self,
        state: &mut State,
        (config, stream): (&ConsumerConfig, &Stream),
        message: &Candidate,
    ) -> String {
        let deliveries = state.pending.get(&message.seq).map_or(1, |p| p.deliveries + 1);
        let consumer_seq = state.delivered_consumer_seq + 1;
        let remaining = pending_after(state, config, stream, message.seq);
        format!(
            "$JS.ACK.{}.{}.{}.{}.{}.{}.{}",
            self.stream_name, self.name, deliveries, message.seq, consumer_seq, message.timestamp_ns, remaining
        )
    }

    /// Assigns the delivery its consumer sequence, tracks it for acks and builds the message.
    fn record_delivery(
        &self,
        state: &mut State,
        (config, stream): (&ConsumerConfig, &Stream),
        mut message: Candidate,
        route: &str,
        now: Instant,
    ) -> Outgoing {
        if let Some(provenance) = stream.provenance() {
            message.headers = provenance.annotate(message.seq, message.headers.take());
        }
        let ack = self.ack_subject(state, (config, stream), &message);
        state.delivered_consumer_seq += 1;
        state.last_delivered = Some(now);
        let consumer_seq = state.delivered_consumer_seq;
        if !message.redelivery {
            state.delivered_stream_seq = state.delivered_stream_seq.max(message.seq);
        }
        let deliveries = state.pending.get(&message.seq).map_or(1, |p| p.deliveries + 1);
        if config.ack_policy == AckPolicy::None {
            state.update_ack_floor();
        } else {
            let deadline = Some(redelivery_deadline(config, deliveries, now));
            state.insert_pending(message.seq, Pending { consumer_seq, deliveries, deadline });
        }
        state.dirty = true;
        let traced = crate::trace::StoredDelivery {
            stream: &self.stream_name,
            consumer: &self.name,
            subject: &message.subject,
            seq: message.seq,
            deliveries,
            body_size: message.payload.len(),
        };
        let (traced_headers, span) = crate::trace::deliver_stored(message.headers.take(), &traced);
        message.headers = traced_headers;
        let headers = if config.headers_only {
            let mut block = message.headers.as_deref().map(|h| String::from_utf8_lossy(h).into_owned());
            let size = format!("{}: {}\r\n\r\n", names::MSG_SIZE, message.payload.len());
            let text = match block.take() {
                Some(existing) => existing.trim_end_matches("\r\n").to_string() + "\r\n" + &size,
                None => format!("NATS/1.0\r\n{size}"),
            };
            Some(Bytes::from(text))
        } else {
            message.headers
        };
        let payload = if config.headers_only { Bytes::new() } else { message.payload };
        let stored_ns = (!message.redelivery).then_some(message.timestamp_ns);
        let subject = message.subject;
        Outgoing { route: route.to_string(), subject, reply: Some(ack), headers, payload, stored_ns, _span: span }
    }
}

/// Where a candidate came from, so it can be put back when it cannot be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Redelivery,
    Initial,
    Stream,
    /// A priority-ordered consumer's read-ahead, at this priority.
    Ahead(u8),
}

/// A stored message about to be delivered.
struct Candidate {
    seq: u64,
    subject: String,
    headers: Option<Bytes>,
    payload: Bytes,
    timestamp_ns: i64,
    redelivery: bool,
    origin: Origin,
}

impl Candidate {
    fn from(message: semaq_store::StoredMessage, origin: Origin) -> Self {
        Candidate {
            seq: message.seq,
            subject: message.subject,
            headers: message.headers,
            payload: message.payload,
            timestamp_ns: message.timestamp_ns,
            redelivery: origin == Origin::Redelivery,
            origin,
        }
    }

    /// Returns an undelivered candidate to where it came from.
    fn put_back(self, state: &mut State) {
        match self.origin {
            Origin::Redelivery => {
                state.redeliveries.insert(self.seq);
            }
            Origin::Initial => state.initial.push_front(self.seq),
            Origin::Stream => state.next_seq = state.next_seq.min(self.seq),
            Origin::Ahead(priority) => state.ahead.put_back(priority, self.seq),
        }
    }
}

/// Messages still to deliver after the one at `seq`, as the ack reply's pending count (clients
/// read 0 as "caught up": an object store get or list ends there, a watcher's initial values
/// too). Counted from the store's metadata as nats-server counts it; the count is kept between
/// deliveries and brought up to date by the few sequences in between, and counted afresh when
/// something was removed from the stream. Past `PENDING_SCAN_SEQS_MAX` sequences to count, the
/// unfiltered estimate (every sequence left) stands in.
fn pending_after(state: &mut State, config: &ConsumerConfig, stream: &Stream, seq: u64) -> u64 {
    let from = (seq + 1).max(state.next_seq);
    let queued = (state.initial.len() + state.ahead.len()) as u64;
    let store = stream.store();
    let stream_state = store.state();
    let (last_seq, removed) = (stream_state.last_seq, stream_state.last_seq.saturating_sub(stream_state.msgs));
    let filters = super::validate::filters(config);
    let scan_max = limits::PENDING_SCAN_SEQS_MAX;
    let count = |seqs: std::ops::Range<u64>| -> Option<u64> {
        let mut total = 0;
        for filter in &filters {
            total += store.count_matching(seqs.clone(), (filter != ">").then_some(filter.as_str()), scan_max)?;
        }
        Some(total)
    };
    let known = state.pending_count.filter(|known| {
        known.removed == removed
            && known.from <= from
            && known.last_seq <= last_seq
            && from - known.from <= scan_max
            && last_seq - known.last_seq <= scan_max
    });
    let counted = match known {
        Some(known) => count(known.last_seq + 1..last_seq + 1)
            .zip(count(known.from..from))
            .map(|(added, passed)| (known.count + added).saturating_sub(passed)),
        None => count(from..last_seq + 1),
    };
    let pending = counted.unwrap_or_else(|| last_seq.saturating_sub(from - 1));
    state.pending_count = counted.map(|count| super::state::PendingCount { from, last_seq, removed, count });
    pending + queued
}

/// Passes over a message the content filter rejects: it counts as acknowledged.
fn skip(state: &mut State, seq: u64) {
    state.skipped.push(seq);
    state.skipped_through = state.skipped_through.max(seq);
    if state.pending.is_empty() {
        state.ack_floor_stream_seq = state.ack_floor_stream_seq.max(seq.min(state.ack_floor_cap()));
    }
    state.dirty = true;
}

/// Whether a consumer hands out its backlog by `Semaq-Priority`: its own metadata decides, else
/// its stream's; durable intents' streams order by priority unless told otherwise.
fn priority_ordered(config: &ConsumerConfig, stream: &Stream) -> bool {
    if let Some(value) = config.metadata.get(ahead::PRIORITY_METADATA_KEY) {
        return ahead::enabled(Some(value));
    }
    let stream_config = stream.config();
    match stream_config.metadata.get(ahead::PRIORITY_METADATA_KEY) {
        Some(value) => ahead::enabled(Some(value)),
        None => stream_config.metadata.contains_key(crate::jetstream::intents::INTENT_KEY),
    }
}

/// The next message read ahead, by priority; messages deleted since they were read are passed over.
fn next_ahead(state: &mut State, store: &dyn semaq_store::StreamStore) -> Option<Candidate> {
    state.ahead.forget_below(store.state().first_seq);
    while let Some((priority, seq)) = state.ahead.pop() {
        if let Ok(Some(message)) = store.get(seq) {
            return Some(Candidate::from(message, Origin::Ahead(priority)));
        }
    }
    None
}

/// Moves deliveries whose ack wait ran out into the redelivery queue, or drops them at max_deliver.
fn collect_due(state: &mut State, config: &ConsumerConfig, now: Instant) {
    if config.ack_policy == AckPolicy::None {
        return;
    }
    for seq in state.due(now) {
        let deliveries = state.pending.get(&seq).map_or(0, |p| p.deliveries);
        if config.max_deliver > 0 && deliveries as i64 >= config.max_deliver {
            state.remove_pending(seq);
            state.update_ack_floor();
            continue;
        }
        state.set_deadline(seq, None);
        state.redeliveries.insert(seq);
    }
}

/// The earliest moment something needs attention (a redelivery, an expiry, a heartbeat).
fn next_wake(state: &State, config: &ConsumerConfig, now: Instant) -> Instant {
    let mut wake = now + limits::CONSUMER_IDLE_WAKE;
    let mut consider = |at: Option<Instant>| {
        if let Some(at) = at {
            wake = wake.min(at.max(now));
        }
    };
    consider(state.earliest_deadline());
    consider(super::pause::ends(config));
    consider(state.pin.as_ref().map(|pin| pin.expires));
    for request in &state.waiting {
        consider(request.expires);
        consider(request.next_heartbeat);
    }
    if config.idle_heartbeat > 0 && config.deliver_subject.is_some() {
        let every = Duration::from_nanos(config.idle_heartbeat as u64);
        consider(Some(state.last_push.map_or(now, |at| at + every)));
    }
    wake
}
