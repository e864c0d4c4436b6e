//! Durable intents: an intent backed by a work-queue stream (stream metadata `semaq.intent`).
//! Publishes on `intent.<name>` are stored by the stream, not routed at once; a dispatcher pulls
//! them through JetStream's own API on the bus (a durable pull consumer, `semaq-agents`) as agents
//! have free capacity, and routes each like any request, with a reply subject of its own.
//!
//! The agent's reply settles the stored message: `ok` (or no status) acks it; `retry` or
//! `error` naks it, so it is redelivered (the synapse learned, so likely to another agent);
//! on its `max_deliver`-th delivery it is copied to the dead-letter subject `dlq.<name>` with
//! `Semaq-Dead-Letter-Reason`, then terminated. No reply within the consumer's `ack_wait` (the
//! agents' request timeout) redelivers it. Everything stored survives a restart: the stream and
//! the consumer are JetStream's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use semaq_wire::headers::{names, Headers};
use serde_json::json;

use super::{outcome_of, Agents, Outcome};
use crate::delivery::{InternalSink, Message, Subscription};
use crate::identity::random_nonce;
use crate::limits;
use crate::sync::lock;

/// The durable consumer each durable intent's stream gets.
pub const CONSUMER: &str = "semaq-agents";
/// Dead letters of intent `<name>` are published on `dlq.<name>`.
pub const DEAD_LETTER_PREFIX: &str = "dlq.";
/// Header a dead letter carries: why it was given up.
pub const DEAD_LETTER_REASON: &str = "Semaq-Dead-Letter-Reason";

/// A durable intent as JetStream declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durable {
    /// The intent.
    pub intent: String,
    /// The work-queue stream behind it.
    pub stream: String,
    /// Deliveries before a message is dead-lettered.
    pub max_deliver: u32,
}

/// A stored message handed to an agent, awaiting its reply.
#[derive(Debug)]
struct Held {
    ack: String,
    delivered: u64,
    /// Its stream sequence.
    seq: u64,
    headers: Option<Bytes>,
    payload: Bytes,
    deadline_us: u64,
}

/// One durable intent's dispatcher.
#[derive(Debug)]
pub struct Dispatcher {
    durable: Durable,
    /// `$SEMAQ.DURABLE.<nonce>`: replies from the JetStream API and from agents come under it.
    prefix: String,
    subscriptions: Mutex<Vec<Arc<Subscription>>>,
    held: Mutex<HashMap<u64, Held>>,
    /// Stream sequence → the connection whose agent said `retry` or `error` to it last, so the
    /// redelivery goes to another agent when there is one (bounded; forgotten when full).
    declined: Mutex<HashMap<u64, u64>>,
    next_id: AtomicU64,
    ready: AtomicBool,
    stopped: AtomicBool,
    wake: tokio::sync::Notify,
}

/// Which of a dispatcher's reply subjects a subscription serves. Each has its own: a pulled
/// message shows its stored subject, not the one it was delivered on.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// `<prefix>.api`: the consumer's creation.
    Api,
    /// `<prefix>.msg`: pulled messages.
    Pulled,
    /// `<prefix>.ack.<id>`: agents' replies.
    Reply,
}

#[derive(Debug)]
struct DispatchSink {
    dispatcher: Weak<Dispatcher>,
    agents: Weak<Agents>,
    role: Role,
}

impl InternalSink for DispatchSink {
    fn receive(&self, message: &Message<'_>) -> bool {
        let (Some(dispatcher), Some(agents)) = (self.dispatcher.upgrade(), self.agents.upgrade()) else { return false };
        match self.role {
            Role::Api => dispatcher.consumer_created(message.payload),
            Role::Pulled => dispatcher.stored_message(&agents, message),
            Role::Reply => {
                let id = message.subject.rsplit('.').next().and_then(|id| id.parse().ok());
                let Some(id) = id else { return false };
                dispatcher.settle(&agents, id, message);
            }
        }
        true
    }
}

impl Dispatcher {
    fn new(durable: Durable) -> Arc<Self> {
        Arc::new(Self {
            durable,
            prefix: format!("$SEMAQ.DURABLE.{}", random_nonce()),
            subscriptions: Mutex::new(Vec::new()),
            held: Mutex::new(HashMap::new()),
            declined: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            ready: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        })
    }

    /// What it dispatches.
    pub fn durable(&self) -> &Durable {
        &self.durable
    }

    /// Wakes the dispatcher: something was stored, or an agent has room.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    fn consumer_created(&self, body: &[u8]) {
        let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        match answer.get("error") {
            None => {
                self.ready.store(true, Ordering::Release);
                self.wake();
            }
            Some(error) => tracing::warn!(stream = %self.durable.stream, %error, "durable intent consumer not created"),
        }
    }

    /// A stored message from the pull: route it to an agent with our own reply subject.
    fn stored_message(&self, agents: &Agents, message: &Message<'_>) {
        let Some(ack) = message.reply.filter(|reply| reply.starts_with("$JS.ACK.")) else { return };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let held = Held {
            ack: ack.to_string(),
            delivered: delivery_count(ack).unwrap_or(1),
            seq: stream_seq(ack).unwrap_or(0),
            headers: message.headers.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(message.payload),
            deadline_us: agents.now_us() + super::duration_us(agents.options.request_timeout) * 2,
        };
        lock(&self.held).insert(id, held);
        let reply = format!("{}.ack.{id}", self.prefix);
        let routed = Message { reply: Some(&reply), publisher: None, ..*message };
        let avoid = stream_seq(ack).and_then(|seq| lock(&self.declined).remove(&seq));
        let mut flush = crate::delivery::FlushSet::default();
        let taken = agents.dispatch_avoiding(&self.durable.intent, &routed, avoid, &mut flush);
        flush.flush();
        if !taken {
            // Nobody took it: release it for a later pull without waiting for ack_wait.
            if let Some(held) = lock(&self.held).remove(&id) {
                agents.bus.publish(&held.ack, None, b"-NAK");
            }
        }
    }

    /// An agent's reply (or the broker's 503 after a wait) settles a held message.
    fn settle(&self, agents: &Agents, id: u64, reply: &Message<'_>) {
        let headers = reply.headers;
        let Some(held) = lock(&self.held).remove(&id) else { return };
        let reason = match outcome_of(headers, 0) {
            Outcome::Success { .. } => {
                agents.bus.publish(&held.ack, None, b"+ACK");
                return;
            }
            Outcome::Error => "error",
            Outcome::Refused if headers.is_some_and(|h| Headers::new(h).status().is_some()) => "no agent had room",
            Outcome::Refused | Outcome::Timeout => "retry",
        };
        if held.delivered < u64::from(self.durable.max_deliver) {
            if let Some(connection) = reply.publisher {
                let mut declined = lock(&self.declined);
                if declined.len() >= limits::DURABLE_INTENT_DECLINED_MAX {
                    declined.clear();
                }
                declined.insert(held.seq, connection);
            }
            agents.bus.publish(&held.ack, None, b"-NAK");
            return;
        }
        self.dead_letter(agents, &held, reason);
    }

    fn dead_letter(&self, agents: &Agents, held: &Held, reason: &str) {
        let mut block = match &held.headers {
            Some(headers) => semaq_wire::HeaderBlock::parse(headers).unwrap_or_default(),
            None => semaq_wire::HeaderBlock::default(),
        };
        block.entries.retain(|(name, _)| !name.eq_ignore_ascii_case(DEAD_LETTER_REASON));
        let why = format!("{reason} after {} deliveries", held.delivered);
        block.insert(DEAD_LETTER_REASON, &why);
        block.insert(names::INTENT, &self.durable.intent);
        block.insert(names::STREAM, &self.durable.stream);
        let subject = format!("{DEAD_LETTER_PREFIX}{}", self.durable.intent);
        let stored = agents.bus.publish(&subject, Some(&block.encode()), &held.payload);
        // Terminate only once something (the dead-letter stream) took the copy; otherwise the
        // message stays in the work queue, undelivered, rather than being lost.
        if stored > 0 {
            agents.bus.publish(&held.ack, None, b"+TERM");
        }
    }

    /// Forgets held messages long past their reply: JetStream redelivers them after ack_wait.
    fn expire(&self, now_us: u64) {
        lock(&self.held).retain(|_, held| held.deadline_us > now_us);
    }
}

/// The delivery count in a `$JS.ACK` subject (both the 9-token and the 12-token form).
fn delivery_count(ack: &str) -> Option<u64> {
    ack_token(ack, 0)
}

/// The stream sequence in a `$JS.ACK` subject.
fn stream_seq(ack: &str) -> Option<u64> {
    ack_token(ack, 1)
}

/// The number `offset` tokens after the delivery count of a `$JS.ACK` subject.
fn ack_token(ack: &str, offset: usize) -> Option<u64> {
    let tokens: Vec<&str> = ack.split('.').collect();
    let index = match tokens.len() {
        9 => 4,
        n if n >= 11 => 6,
        _ => return None,
    };
    tokens.get(index + offset)?.parse().ok()
}

/// Starts a dispatcher for `durable`; it runs until [`stop`] or until the agents are gone.
pub fn start(agents: &Arc<Agents>, durable: Durable) -> Option<Arc<Dispatcher>> {
    let dispatcher = Dispatcher::new(durable);
    for (suffix, role) in [("api", Role::Api), ("msg", Role::Pulled), ("ack.*", Role::Reply)] {
        let sink =
            Arc::new(DispatchSink { dispatcher: Arc::downgrade(&dispatcher), agents: Arc::downgrade(agents), role });
        let subject = format!("{}.{suffix}", dispatcher.prefix);
        let subscription = agents.bus.subscribe_internal(&subject, None, sink).ok()?;
        lock(&dispatcher.subscriptions).push(subscription);
    }
    tokio::spawn(run(dispatcher.clone(), Arc::downgrade(agents)));
    Some(dispatcher)
}

/// Stops a dispatcher; messages it holds are redelivered by JetStream after ack_wait.
pub fn stop(agents: &Agents, dispatcher: &Dispatcher) {
    dispatcher.stopped.store(true, Ordering::Release);
    dispatcher.wake();
    for subscription in std::mem::take(&mut *lock(&dispatcher.subscriptions)) {
        agents.bus.unsubscribe_internal(&subscription);
    }
}

async fn run(dispatcher: Arc<Dispatcher>, agents: Weak<Agents>) {
    let Durable { stream, max_deliver, .. } = dispatcher.durable.clone();
    while !dispatcher.stopped.load(Ordering::Acquire) {
        let Some(agents) = agents.upgrade() else { return };
        if !dispatcher.ready.load(Ordering::Acquire) {
            let ack_wait = agents.options.request_timeout.as_nanos().min(i64::MAX as u128) as i64;
            let config = json!({
                "stream_name": stream,
                "config": { "durable_name": CONSUMER, "ack_policy": "explicit", "ack_wait": ack_wait,
                            "max_deliver": max_deliver, "max_ack_pending": -1 }
            });
            let api = format!("$JS.API.CONSUMER.CREATE.{stream}.{CONSUMER}");
            let reply = format!("{}.api", dispatcher.prefix);
            publish_request(&agents, &api, &reply, config.to_string().as_bytes());
        } else {
            dispatcher.expire(agents.now_us());
            let held = lock(&dispatcher.held).len();
            let free = agents.free_capacity(&dispatcher.durable.intent);
            let batch = free.min(limits::DURABLE_INTENT_PULL_MESSAGES_MAX.saturating_sub(held));
            if batch > 0 {
                let next = format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{CONSUMER}");
                let reply = format!("{}.msg", dispatcher.prefix);
                let body = json!({ "batch": batch, "no_wait": true });
                publish_request(&agents, &next, &reply, body.to_string().as_bytes());
            }
        }
        drop(agents);
        // A store, a freed slot or a new agent wakes us; the tick covers what nothing signals.
        let _ = tokio::time::timeout(limits::DURABLE_INTENT_POLL_INTERVAL, dispatcher.wake.notified()).await;
    }
}

fn publish_request(agents: &Agents, subject: &str, reply: &str, body: &[u8]) {
    let message = Message { subject, reply: Some(reply), headers: None, payload: body, publisher: None };
    agents.bus.publish_as(subject, &message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_count_is_read_from_both_ack_subject_forms() {
        assert_eq!(delivery_count("$JS.ACK.ORDERS.semaq-agents.3.42.7.1700000000000000000.0"), Some(3));
        assert_eq!(delivery_count("$JS.ACK.hub.ACC.ORDERS.semaq-agents.2.42.7.1700000000000000000.0.tok"), Some(2));
        assert_eq!(delivery_count("$JS.ACK.ORDERS"), None);
        assert_eq!(stream_seq("$JS.ACK.ORDERS.semaq-agents.3.42.7.1700000000000000000.0"), Some(42));
    }
}
