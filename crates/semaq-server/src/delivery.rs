//! Fan-out: hands one published message to every subscription the router matched.
//!
//! Plain subscriptions each get a copy; each queue group gets one, to a member picked at
//! random (skipping members that are closing or refuse it). Writers are woken once per input
//! batch through a [`FlushSet`], not once per message.
//!
//! A `Semaq-Lossy: true` message for a client past its high-water mark is shed, not queued
//! (see [`crate::outbound`]): counted for the client and in the server's [`crate::stats::Shed`],
//! and not delivered, so a queue group offers it to its next member.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use semaq_wire::headers::{names, Headers};
use semaq_wire::{encode, ByteString};

use crate::client::Client;
use crate::outbound::Appended;
use crate::router::{Matches, Router};

/// Where a subscription's messages go.
#[derive(Debug, Clone)]
pub enum Sink {
    /// A client connection.
    Client(Arc<Client>),
    /// A part of the server itself (the JetStream API, a stream capturing its subjects, ...).
    Internal(Arc<dyn InternalSink>),
}

/// A server component that receives published messages. It must not block: it runs on the
/// publisher's read loop, so it queues work (bounded) for its own task.
pub trait InternalSink: Send + Sync + std::fmt::Debug {
    /// Takes one message; returns false when it cannot (it is then not counted as delivered).
    fn receive(&self, message: &Message<'_>) -> bool;

    /// As [`InternalSink::receive`], for a sink that delivers to clients itself: it adds them
    /// to the publisher's `flush`, so their writers wake once per input batch.
    fn receive_batched(&self, message: &Message<'_>, _flush: &mut FlushSet) -> bool {
        self.receive(message)
    }
}

/// [`InternalSink::receive`] for a sink whose work is in `receive_batched`: one message, its
/// clients' writers woken at once.
pub fn receive_unbatched(sink: &dyn InternalSink, message: &Message<'_>) -> bool {
    let mut flush = FlushSet::default();
    let taken = sink.receive_batched(message, &mut flush);
    flush.flush();
    taken
}

/// One `SUB` (or an internal subscription): where matching messages go, and its
/// auto-unsubscribe budget.
#[derive(Debug)]
pub struct Subscription {
    /// Where deliveries go.
    pub sink: Sink,
    /// Subject filter.
    pub subject: ByteString,
    /// Queue group.
    pub queue: Option<ByteString>,
    /// The client's id for it.
    pub sid: ByteString,
    /// Deliveries after which it ends; 0 = unlimited.
    max_msgs: AtomicU64,
    /// Deliveries so far.
    delivered: AtomicU64,
}

impl Subscription {
    /// A subscription without a delivery limit.
    pub fn new(sink: Sink, subject: ByteString, queue: Option<ByteString>, sid: ByteString) -> Self {
        Self { sink, subject, queue, sid, max_msgs: AtomicU64::new(0), delivered: AtomicU64::new(0) }
    }

    /// Ends the subscription after `max` deliveries in all.
    pub fn set_max_msgs(&self, max: u64) {
        self.max_msgs.store(max, Ordering::Release);
    }

    /// Reserves one delivery; false when the auto-unsubscribe budget is spent.
    pub fn claim_delivery(&self) -> bool {
        let delivered = self.delivered.fetch_add(1, Ordering::AcqRel) + 1;
        let max = self.max_msgs.load(Ordering::Acquire);
        max == 0 || delivered <= max
    }

    /// Whether the budget is now spent, so the subscription should leave the router.
    pub fn is_exhausted(&self) -> bool {
        let max = self.max_msgs.load(Ordering::Acquire);
        max != 0 && self.delivered.load(Ordering::Acquire) >= max
    }

    /// Deliveries so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// The client behind it, for client subscriptions.
    pub fn client(&self) -> Option<&Arc<Client>> {
        match &self.sink {
            Sink::Client(client) => Some(client),
            Sink::Internal(_) => None,
        }
    }
}

/// A subscription as the router holds it; equal only to itself.
#[derive(Debug, Clone)]
pub struct SubscriberRef(pub Arc<Subscription>);

impl PartialEq for SubscriberRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SubscriberRef {}

impl std::hash::Hash for SubscriberRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.0).hash(state);
    }
}

/// One message on its way to subscribers.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// Literal subject it was published to.
    pub subject: &'a str,
    /// Reply subject, for requests.
    pub reply: Option<&'a str>,
    /// Raw `NATS/1.0` header block.
    pub headers: Option<&'a [u8]>,
    /// Body.
    pub payload: &'a [u8],
    /// The id of the client connection that published it; `None` for the server's own messages.
    pub publisher: Option<u64>,
}

/// Clients whose buffers received bytes in the current batch and whose writers must be woken.
#[derive(Debug, Default)]
pub struct FlushSet {
    clients: Vec<Arc<Client>>,
    seen: rustc_hash::FxHashSet<u64>,
}

impl FlushSet {
    /// Remembers that `client` has bytes to send.
    pub fn add(&mut self, client: &Arc<Client>) {
        if self.seen.insert(client.id) {
            self.clients.push(client.clone());
        }
    }

    /// Wakes every remembered writer and forgets them.
    pub fn flush(&mut self) {
        for client in self.clients.drain(..) {
            client.outbound.flush();
        }
        self.seen.clear();
    }
}

/// Delivers `message` to everything in `matches`; returns how many subscriptions received it.
/// `publisher` is the publishing client, whose own subscriptions are skipped when it set `echo: false`.
pub fn fan_out(
    router: &Router<SubscriberRef>,
    matches: &Matches<SubscriberRef>,
    message: &Message<'_>,
    publisher: Option<&Client>,
    flush: &mut FlushSet,
) -> usize {
    let mut delivered = 0;
    for subscriber in &matches.plain {
        if may_receive(&subscriber.0, message, publisher) && deliver(router, &subscriber.0, message, flush) {
            delivered += 1;
        }
    }
    for group in &matches.groups {
        if group.members.is_empty() {
            continue;
        }
        let start = rand::random::<u32>() as usize % group.members.len();
        let rotated = group.members[start..].iter().chain(&group.members[..start]);
        for member in rotated {
            if may_receive(&member.0, message, publisher) && deliver(router, &member.0, message, flush) {
                delivered += 1;
                break;
            }
        }
    }
    delivered
}

fn may_receive(subscription: &Subscription, message: &Message<'_>, publisher: Option<&Client>) -> bool {
    let Sink::Client(client) = &subscription.sink else { return true };
    if publisher.is_some_and(|publisher| publisher.id == client.id && !client.echo()) {
        return false;
    }
    !client.outbound.is_closing() && client.may_receive(message.subject)
}

/// Appends one delivery to the subscription's client, honouring auto-unsubscribe; false when it
/// was not delivered (budget spent, internal sink refused, client closing, or shed as lossy).
/// A shed message has used its auto-unsubscribe slot, as nats-server counts a dropped one.
pub fn deliver(
    router: &Router<SubscriberRef>,
    subscription: &Arc<Subscription>,
    message: &Message<'_>,
    flush: &mut FlushSet,
) -> bool {
    if !subscription.claim_delivery() {
        return false;
    }
    if subscription.is_exhausted() {
        router.remove(&subscription.subject, subscription.queue.as_deref(), &SubscriberRef(subscription.clone()));
        if let Some(client) = subscription.client() {
            // A requester measured for latency may have stopped listening (`408`).
            client.interest_dropped.notify_one();
        }
    }
    let client = match &subscription.sink {
        Sink::Client(client) => client,
        Sink::Internal(sink) => return sink.receive_batched(message, flush),
    };
    let traced = crate::trace::in_traced_publish().then(|| trace_delivery(client, subscription, message));
    if traced.as_ref().is_some_and(|traced| traced.skip) {
        return true;
    }
    let rewritten = traced.as_ref().and_then(|traced| traced.headers.as_deref());
    let headers = if client.headers() { rewritten.or(message.headers) } else { None };
    let subject = message.subject.as_bytes();
    let sid = subscription.sid.as_bytes();
    let reply = message.reply.map(str::as_bytes);
    let len = encode::message_len(subject, sid, reply, headers, message.payload);
    // Whether the publisher marked it lossy, not whether this client reads headers.
    let lossy = || message.headers.is_some_and(is_lossy);
    let appended = client.outbound.append_or_shed(len, lossy, |buffer| {
        encode::message(buffer, subject, sid, reply, headers, message.payload);
    });
    match appended {
        Ok(Appended::Queued) => {
            let bytes = headers.map_or(0, <[u8]>::len) + message.payload.len();
            client.outbound.traffic.record(bytes);
            client.server_subjects.record_out(message.subject, bytes);
            if let Some(reply) = message.reply {
                client.record_reply(reply);
            }
            flush.add(client);
            true
        }
        Ok(Appended::Shed) => {
            let bytes = message.headers.map_or(0, <[u8]>::len) + message.payload.len();
            client.outbound.lossy_shed.record(bytes);
            client.server_shed.record(message.subject, bytes);
            false
        }
        Err(_) => false,
    }
}

/// Traces one delivery of a traced publish (its deliver span, `Nats-Trace-Dest` egress).
fn trace_delivery(client: &Client, subscription: &Subscription, message: &Message<'_>) -> crate::trace::Delivery {
    let recipient = crate::trace::Recipient {
        cid: client.id,
        name: client.details().and_then(|d| d.options.name.as_deref()),
        account: client.details().and_then(|d| d.account.as_deref()).unwrap_or(crate::options::GLOBAL_ACCOUNT),
        subscription: &subscription.subject,
        queue: subscription.queue.as_deref(),
        headers: client.headers(),
    };
    crate::trace::deliver(&recipient, message.subject, message.headers)
}

/// Whether a header block says `Semaq-Lossy: true` (name and value in any case).
fn is_lossy(block: &[u8]) -> bool {
    Headers::new(block).get(names::LOSSY).is_some_and(|value| value.eq_ignore_ascii_case("true"))
}

/// A request to one of the server's own APIs, queued for the task that answers it.
#[derive(Debug)]
pub struct QueuedRequest {
    /// The subject it was sent to.
    pub subject: String,
    /// Where the answer goes.
    pub reply: String,
    /// The request body.
    pub payload: bytes::Bytes,
}

/// An internal subscription that queues requests (bounded) for an answering task; a request
/// without a reply subject is dropped, and a full queue is a slow consumer.
#[derive(Debug)]
pub struct RequestQueue {
    /// The answering task's queue.
    pub queue: tokio::sync::mpsc::Sender<QueuedRequest>,
}

impl InternalSink for RequestQueue {
    fn receive(&self, message: &Message<'_>) -> bool {
        let Some(reply) = message.reply else { return true };
        let request = QueuedRequest {
            subject: message.subject.to_string(),
            reply: reply.to_string(),
            payload: bytes::Bytes::copy_from_slice(message.payload),
        };
        self.queue.try_send(request).is_ok()
    }
}
