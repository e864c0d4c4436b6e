//! The agent network (SPEC §6): agents announce the intents they serve, and each message on
//! `intent.<name>` goes to exactly one live agent, chosen by what the broker has observed.
//!
//! - `announce`: heartbeats (`$SEMAQ.AGENT.HB`), goodbyes (`$SEMAQ.AGENT.BYE`) and NATS
//!   services' `$SRV.INFO` replies, parsed and checked.
//! - `synapse`: the learned weight, latency and failure penalty of each (intent, agent), and
//!   the power-of-two-choices cost. `affinity`: `Semaq-Session` → agent by rendezvous hashing
//!   with a load bound. `waiting`: requests waiting for capacity, by `Semaq-Priority`.
//! - `table`: the state those act on, under one lock that no I/O is done under.
//! - `in_flight`: requests handed to agents, which replies take back without the table lock.
//!
//! A request keeps its reply subject, so the agent answers the requester directly. The broker
//! sees the answer pass: while a connection owes replies ([`Client::owes_replies`]) the reader
//! shows its publishes to [`Agents::observe_reply`], which matches them to requests in flight
//! by (connection, reply subject). Routed messages go only to subscriptions of the connection
//! that announced the agent, so one client cannot draw another's traffic by naming its inbox.

mod affinity;
mod announce;
pub mod durable;
mod in_flight;
#[cfg(test)]
mod simulate;
mod synapse;
mod table;
mod waiting;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use semaq_wire::headers::{names, Headers};
use semaq_wire::HeaderBlock;
use serde_json::{json, Value};

pub use self::announce::{is_valid_intent, BYE_SUBJECT, HEARTBEAT_SUBJECT};
use self::announce::{AnnounceError, Announcement};
use self::durable::{Dispatcher, Durable};
use self::in_flight::{InFlight, Learned};
use self::synapse::Outcome;
pub use self::table::Answered;
use self::table::{Decision, Parked, Source, Table, Target};
use crate::bus::Bus;
use crate::client::Client;
use crate::delivery::{self, FlushSet, InternalSink, Message};
use crate::identity::random_nonce;
use crate::limits;
use crate::options::AgentOptions;
use crate::router::RouterError;
use crate::stats::bump;
use crate::sync::{lock, read, write};

/// Subjects under this prefix are intents: `intent.<name>`.
pub const INTENT_PREFIX: &str = "intent.";
/// The request subject that answers with what `/semaq/agents` shows.
pub const API_LIST: &str = "$SEMAQ.API.AGENT.LIST";
/// Where NATS services answer who they are.
const SERVICE_INFO: &str = "$SRV.INFO";

/// Server-wide agent network counters.
#[derive(Debug, Default)]
struct Counters {
    heartbeats: AtomicU64,
    heartbeats_refused: AtomicU64,
    unknown_intents: AtomicU64,
    no_responders: AtomicU64,
}

/// The agent network of one server.
#[derive(Debug)]
pub struct Agents {
    bus: Arc<Bus>,
    options: AgentOptions,
    epoch: Instant,
    table: Mutex<Table>,
    /// The table's requests in flight, which replies find without the table lock.
    in_flight: Arc<InFlight>,
    counters: Counters,
    /// The reply subject the server's `$SRV.INFO` polls ask services to answer on.
    service_reply: String,
    /// Durable intents' dispatchers, by intent. Taken alone; read on every route and reply.
    durables: RwLock<HashMap<String, Arc<Dispatcher>>>,
    /// Whether `durables` has any: most servers have none, and every route and reply asks.
    any_durable: AtomicBool,
}

/// Which of the agent network's subjects a subscription serves.
#[derive(Debug, Clone, Copy)]
enum Role {
    Heartbeat,
    Bye,
    Intent,
    ServiceInfo,
    List,
}

#[derive(Debug)]
struct AgentSink {
    // Weak: the bus's router holds this sink, and the agents hold the bus.
    agents: Weak<Agents>,
    role: Role,
}

impl InternalSink for AgentSink {
    fn receive(&self, message: &Message<'_>) -> bool {
        crate::delivery::receive_unbatched(self, message)
    }

    fn receive_batched(&self, message: &Message<'_>, flush: &mut FlushSet) -> bool {
        let Some(agents) = self.agents.upgrade() else { return false };
        match self.role {
            Role::Intent => return agents.route(message, flush),
            Role::Heartbeat => agents.heartbeat(message),
            Role::Bye => agents.bye(message),
            Role::ServiceInfo => agents.service_info(message),
            Role::List => agents.answer(message.reply, agents.snapshot()),
        }
        true
    }
}

/// Starts the agent network: its subscriptions, the sweeper, and `$SRV` discovery.
pub fn start(bus: &Arc<Bus>, options: &AgentOptions) -> Result<Arc<Agents>, RouterError> {
    let table = Table::default();
    let agents = Arc::new(Agents {
        bus: bus.clone(),
        options: options.clone(),
        epoch: Instant::now(),
        in_flight: table.in_flight(),
        table: Mutex::new(table),
        counters: Counters::default(),
        service_reply: format!("$SEMAQ.SRV.INFO.{}", random_nonce()),
        durables: RwLock::new(HashMap::new()),
        any_durable: AtomicBool::new(false),
    });
    let subjects = [
        (HEARTBEAT_SUBJECT, Role::Heartbeat),
        (BYE_SUBJECT, Role::Bye),
        ("intent.>", Role::Intent),
        (agents.service_reply.as_str(), Role::ServiceInfo),
        (API_LIST, Role::List),
    ];
    for (subject, role) in subjects {
        bus.subscribe_internal(subject, None, Arc::new(AgentSink { agents: Arc::downgrade(&agents), role }))?;
    }
    tokio::spawn(sweep_forever(Arc::downgrade(&agents)));
    if options.service_discovery {
        tokio::spawn(discover_services_forever(Arc::downgrade(&agents), options.heartbeat_interval));
    }
    Ok(agents)
}

async fn sweep_forever(agents: Weak<Agents>) {
    let mut interval = tokio::time::interval(limits::AGENT_SWEEP_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(agents) = agents.upgrade() else { return };
        agents.sweep();
    }
}

async fn discover_services_forever(agents: Weak<Agents>, every: std::time::Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(agents) = agents.upgrade() else { return };
        if !agents.services_listen() {
            continue;
        }
        let poll = Message {
            subject: SERVICE_INFO,
            reply: Some(&agents.service_reply),
            headers: None,
            payload: b"",
            publisher: None,
        };
        agents.bus.publish_as(SERVICE_INFO, &poll);
    }
}

impl Agents {
    /// Whether some connection subscribed to `$SRV.INFO` itself, as every NATS service does:
    /// without one the poll is skipped, so a `>` subscriber sees no polls on a server without
    /// services.
    fn services_listen(&self) -> bool {
        let matches = self.bus.router.matches(SERVICE_INFO);
        let mut subscribers = matches.plain.iter().chain(matches.groups.iter().flat_map(|g| g.members.iter()));
        subscribers.any(|s| s.0.subject.as_bytes() == SERVICE_INFO.as_bytes() && s.0.client().is_some())
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Makes `declared` the durable intents: starts a dispatcher for each new one, stops those
    /// no stream backs any more. JetStream calls it whenever its streams change.
    pub fn set_durable(self: &Arc<Self>, declared: Vec<Durable>) {
        let mut durables = write(&self.durables);
        let stale: Vec<String> = durables
            .iter()
            .filter(|(intent, d)| !declared.iter().any(|n| &n.intent == *intent && n == d.durable()))
            .map(|(intent, _)| intent.clone())
            .collect();
        for intent in stale {
            if let Some(dispatcher) = durables.remove(&intent) {
                durable::stop(self, &dispatcher);
            }
        }
        for declaration in declared {
            if durables.contains_key(&declaration.intent) {
                continue;
            }
            let intent = declaration.intent.clone();
            if let Some(dispatcher) = durable::start(self, declaration) {
                durables.insert(intent, dispatcher);
            }
        }
        self.any_durable.store(!durables.is_empty(), Ordering::Release);
    }

    /// The durable intent's dispatcher, if `name` is one.
    fn durable(&self, name: &str) -> Option<Arc<Dispatcher>> {
        if !self.any_durable.load(Ordering::Acquire) {
            return None;
        }
        read(&self.durables).get(name).cloned()
    }

    /// Requests the live agents of `name` could take now.
    fn free_capacity(&self, name: &str) -> usize {
        lock(&self.table).free_capacity(name)
    }

    /// Forgets every agent a closed connection announced, at once.
    pub fn connection_closed(&self, connection: u64) {
        lock(&self.table).connection_closed(connection);
    }

    /// What `/semaq/agents`, `$SEMAQ.API.AGENT.LIST` and `semaq agent ls` show.
    pub fn snapshot(&self) -> Value {
        let now = self.now_us();
        let mut snapshot = lock(&self.table).snapshot(now);
        snapshot["heartbeats"] = json!({
            "accepted": self.counters.heartbeats.load(Ordering::Relaxed),
            "refused": self.counters.heartbeats_refused.load(Ordering::Relaxed),
        });
        snapshot["unknown_intents"] = json!(self.counters.unknown_intents.load(Ordering::Relaxed));
        snapshot["no_responders"] = json!(self.counters.no_responders.load(Ordering::Relaxed));
        snapshot["options"] = json!({
            "heartbeat_interval_ms": self.options.heartbeat_interval.as_millis() as u64,
            "expiry_ms": self.options.expiry().as_millis() as u64,
            "wait_ms": self.options.wait.as_millis() as u64,
            "request_timeout_ms": self.options.request_timeout.as_millis() as u64,
        });
        snapshot
    }

    /// Sends `body` to `reply`, if there is one.
    fn answer(&self, reply: Option<&str>, body: Value) {
        if let Some(reply) = reply {
            self.bus.publish(reply, None, body.to_string().as_bytes());
        }
    }

    fn heartbeat(&self, message: &Message<'_>) {
        let outcome =
            self.announce_from(message.publisher, announce::parse_heartbeat(message.payload), Source::Heartbeat);
        match outcome {
            Ok(agent_id) => {
                bump(&self.counters.heartbeats);
                self.answer(message.reply, json!({ "ok": true, "agent_id": agent_id }));
            }
            Err(error) => {
                bump(&self.counters.heartbeats_refused);
                tracing::debug!(%error, "heartbeat refused");
                self.answer(message.reply, json!({ "error": { "code": 400, "description": error.to_string() } }));
            }
        }
    }

    /// Checks the announcing connection's right to its inbox and records the agent.
    fn announce_from(
        &self,
        publisher: Option<u64>,
        announcement: Result<Announcement, AnnounceError>,
        source: Source,
    ) -> Result<String, AnnounceError> {
        let announcement = announcement?;
        let client = publisher.and_then(|id| self.bus.clients.get(id));
        let Some(client) = client else {
            return Err(AnnounceError::Invalid("agents announce from a client connection".to_string()));
        };
        if !may_subscribe(&client, &announcement.inbox) {
            return Err(AnnounceError::InboxNotPermitted(announcement.inbox));
        }
        let agent_id = announcement.agent_id.clone();
        lock(&self.table).upsert(announcement, &client, source, self.now_us())?;
        Ok(agent_id)
    }

    fn bye(&self, message: &Message<'_>) {
        let result = announce::parse_bye(message.payload).and_then(|agent_id| {
            let mut table = lock(&self.table);
            // Only the connection that announced an agent may take it away.
            let owned = message.publisher.is_some_and(|id| table.is_announced_by(&agent_id, id));
            match owned && table.remove(&agent_id) {
                true => Ok(agent_id),
                false => Err(AnnounceError::Invalid(format!("no agent {agent_id:?} announced by this connection"))),
            }
        });
        match result {
            Ok(agent_id) => self.answer(message.reply, json!({ "ok": true, "agent_id": agent_id })),
            Err(error) => {
                self.answer(message.reply, json!({ "error": { "code": 404, "description": error.to_string() } }))
            }
        }
    }

    fn service_info(&self, message: &Message<'_>) {
        let Ok(info) = serde_json::from_slice::<Value>(message.payload) else { return };
        for announcement in announce::service_agents(&info, &self.options.service_subjects) {
            if let Err(error) = self.announce_from(message.publisher, Ok(announcement), Source::Service) {
                tracing::debug!(%error, "service endpoint not routed");
            }
        }
    }

    /// Routes one message on `intent.<name>`; false when no agent took it (a request then
    /// gets the connection's usual no-responders status). A durable intent's stream stores it
    /// instead, and its dispatcher is woken to hand it out.
    fn route(&self, message: &Message<'_>, flush: &mut FlushSet) -> bool {
        let Some(name) = message.subject.strip_prefix(INTENT_PREFIX) else { return false };
        if let Some(dispatcher) = self.durable(name) {
            dispatcher.wake();
            return false;
        }
        self.dispatch(name, message, flush)
    }

    /// Hands one message of intent `name` to an agent, or parks it while all are full.
    fn dispatch(&self, name: &str, message: &Message<'_>, flush: &mut FlushSet) -> bool {
        self.dispatch_avoiding(name, message, None, flush)
    }

    /// As `dispatch`, preferring agents of connections other than `avoid` (the one that
    /// declined this message), which gets it only when no other agent is live.
    fn dispatch_avoiding(&self, name: &str, message: &Message<'_>, avoid: Option<u64>, flush: &mut FlushSet) -> bool {
        let [session, priority] = match message.headers {
            Some(block) => Headers::new(block).get_many(&[names::SESSION, names::PRIORITY]),
            None => [None, None],
        };
        for _ in 0..limits::AGENT_HANDOFF_TRIES_MAX {
            let now = self.now_us();
            let request = message.reply.map(|reply| (reply, now + duration_us(self.options.request_timeout)));
            let decision = lock(&self.table).decide(name, (session, avoid), request, now, |n| rand::random_range(0..n));
            match decision {
                Decision::Deliver(target) => {
                    if self.hand_off(&target, message, flush) {
                        return true;
                    }
                    self.refused(&target, message.reply);
                }
                Decision::Wait => return self.park(name, message, avoid, crate::priority::priority_of(priority)),
                Decision::Unroutable => break,
            }
        }
        self.unroutable(name, message.reply)
    }

    /// Counts a message no agent took.
    fn unroutable(&self, name: &str, reply: Option<&str>) -> bool {
        let mut table = lock(&self.table);
        if !table.knows(name) {
            bump(&self.counters.unknown_intents);
        }
        if reply.is_some() {
            bump(&self.counters.no_responders);
            table.count_no_responders(name);
        }
        false
    }

    /// An agent's connection could not take a message: free its slot and weaken the synapse.
    fn refused(&self, target: &Target, reply: Option<&str>) {
        let Some(reply) = reply else { return };
        let now = self.now_us();
        if let Some(pending) = self.in_flight.take(target.client.id, reply) {
            lock(&self.table).complete(&pending, Some(Outcome::Refused), now);
        }
    }

    fn park(&self, name: &str, message: &Message<'_>, avoid: Option<u64>, priority: u8) -> bool {
        let Some(reply) = message.reply else { return false };
        let parked = Parked {
            subject: message.subject.to_string(),
            reply: reply.to_string(),
            headers: message.headers.map(bytes::Bytes::copy_from_slice),
            payload: bytes::Bytes::copy_from_slice(message.payload),
            publisher: message.publisher,
            avoid,
        };
        let deadline = self.now_us() + duration_us(self.options.wait);
        let parked = lock(&self.table).park(name, priority, deadline, parked);
        if !parked {
            bump(&self.counters.no_responders);
        }
        parked
    }

    /// Delivers a routed message to the subscriptions of the chosen agent's own connection,
    /// leaving its writer's wake-up to `flush`.
    fn hand_off(&self, target: &Target, message: &Message<'_>, flush: &mut FlushSet) -> bool {
        let name = &message.subject[INTENT_PREFIX.len().min(message.subject.len())..];
        let headers = routed_headers(message.headers, &target.agent_id, name);
        let routed = Message {
            subject: &target.inbox,
            reply: message.reply,
            headers: Some(&headers),
            payload: message.payload,
            publisher: message.publisher,
        };
        let matches = self.bus.router.matches(&target.inbox);
        let mut own = matches
            .plain
            .iter()
            .chain(matches.groups.iter().flat_map(|group| group.members.iter()))
            .filter(|s| s.0.client().is_some_and(|client| client.id == target.client.id));
        own.any(|subscription| delivery::deliver(&self.bus.router, &subscription.0, &routed, flush))
    }

    /// Matches a publish from an agent's connection to the request it answers, if any, and
    /// returns the agent and intent it answered for.
    pub fn observe_reply(&self, connection: u64, subject: &str, headers: Option<&[u8]>) -> Option<Answered> {
        let now = self.now_us();
        let pending = self.in_flight.take(connection, subject)?;
        let answered = Answered::of(&pending);
        let outcome = outcome_of(headers, pending.elapsed_us(now));
        // The table learns at its next decision; while requests wait, their slot is freed now.
        if let Err(lesson) = self.in_flight.defer(Learned { pending, outcome, at_us: now }) {
            let ready = {
                let mut table = lock(&self.table);
                let mut ready = table.apply_learned();
                ready.extend(table.complete(&lesson.pending, Some(lesson.outcome), lesson.at_us));
                ready.sort();
                ready.dedup();
                ready
            };
            self.offer_freed(ready);
        }
        if let Some(dispatcher) = self.durable(&answered.intent) {
            dispatcher.wake();
        }
        Some(answered)
    }

    /// Hands waiting requests of `intents` to agents that have room again.
    fn offer_freed(&self, intents: Vec<Arc<str>>) {
        for name in intents {
            // Bounded: each round takes one waiting request or stops.
            for _ in 0..limits::AGENT_WAITING_MESSAGES_MAX {
                let Some(parked) = lock(&self.table).unpark(&name) else { break };
                let message = Message {
                    subject: &parked.subject,
                    reply: Some(&parked.reply),
                    headers: parked.headers.as_deref(),
                    payload: &parked.payload,
                    publisher: parked.publisher,
                };
                let mut flush = FlushSet::default();
                // Still away from the agent that declined it: a durable intent's redelivery
                // that waited for capacity must not go back to it (and be dead-lettered there).
                if !self.dispatch_avoiding(&name, &message, parked.avoid, &mut flush) {
                    self.tell_no_responders(&parked);
                }
                flush.flush();
            }
        }
    }

    /// Sends the standard 503 to a waiting requester that asked for it (the server's own
    /// requesters, durable intents' dispatchers, always do).
    fn tell_no_responders(&self, parked: &Parked) {
        let wants = match parked.publisher {
            Some(id) => self.bus.clients.get(id).is_some_and(|c| c.wants_no_responders()),
            None => true,
        };
        if wants {
            let status = HeaderBlock::status(503, "").encode();
            self.bus.publish(&parked.reply, Some(&status), b"");
        }
    }

    fn sweep(&self) {
        let now = self.now_us();
        let swept = lock(&self.table).sweep(now, duration_us(self.options.expiry()));
        for parked in &swept.wait_expired {
            bump(&self.counters.no_responders);
            self.tell_no_responders(parked);
        }
        self.offer_freed(swept.ready);
    }
}

fn duration_us(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn may_subscribe(client: &Client, inbox: &str) -> bool {
    client.details().and_then(|d| d.permissions.as_ref()).is_none_or(|p| p.may_subscribe(inbox))
}

/// What a reply says of its request: a 503 status or `Semaq-Status: retry` is a refusal,
/// `Semaq-Status: error` an error, anything else a success.
fn outcome_of(headers: Option<&[u8]>, latency_us: u64) -> Outcome {
    let Some(block) = headers else { return Outcome::Success { latency_us, tokens_out: None } };
    let headers = Headers::new(block);
    if headers.status().is_some_and(|(code, _)| code == 503) {
        return Outcome::Refused;
    }
    let [status, tokens_out] = headers.get_many(&[names::STATUS, names::TOKENS_OUT]);
    match status.map(str::trim) {
        Some(s) if s.eq_ignore_ascii_case("error") => Outcome::Error,
        Some(s) if s.eq_ignore_ascii_case("retry") => Outcome::Refused,
        _ => Outcome::Success { latency_us, tokens_out: tokens_out.and_then(|t| t.trim().parse().ok()) },
    }
}

/// The routed copy's header block: the original's lines without any `Semaq-Agent` a publisher
/// wrote, then `Semaq-Agent` naming the agent chosen, and `Semaq-Intent` if it was missing.
fn routed_headers(original: Option<&[u8]>, agent_id: &str, intent: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(original.map_or(0, <[u8]>::len) + agent_id.len() + intent.len() + 48);
    let mut has_intent = false;
    match original.filter(|block| block.starts_with(b"NATS/1.0") && block.ends_with(b"\r\n\r\n")) {
        Some(block) => {
            let body = &block[..block.len() - 2];
            for (index, line) in body.split_inclusive(|byte| *byte == b'\n').enumerate() {
                let name = line.split(|byte| *byte == b':').next().unwrap_or_default();
                let name = name.trim_ascii();
                if index > 0 && name.eq_ignore_ascii_case(names::AGENT.as_bytes()) {
                    continue;
                }
                has_intent |= index > 0 && name.eq_ignore_ascii_case(names::INTENT.as_bytes());
                out.extend_from_slice(line);
            }
        }
        None => out.extend_from_slice(b"NATS/1.0\r\n"),
    }
    for (name, value) in [(names::AGENT, agent_id), (names::INTENT, intent)] {
        if name == names::INTENT && has_intent {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_headers_name_the_agent_and_drop_a_forged_one() {
        let block = b"NATS/1.0\r\nSemaq-Session: s1\r\nsemaq-agent: forged\r\n\r\n";
        let routed = routed_headers(Some(block), "pay-1", "resolve_payment");
        let headers = Headers::new(&routed);
        assert!(headers.check().is_ok());
        assert_eq!(headers.get(names::AGENT), Some("pay-1"));
        assert_eq!(headers.get(names::SESSION), Some("s1"));
        assert_eq!(headers.get(names::INTENT), Some("resolve_payment"));
        assert_eq!(headers.iter().filter(|(name, _)| name.eq_ignore_ascii_case(names::AGENT)).count(), 1);
    }

    #[test]
    fn routed_headers_keep_the_publishers_intent_and_start_a_block_when_there_was_none() {
        let routed = routed_headers(None, "a", "x");
        assert_eq!(routed, b"NATS/1.0\r\nSemaq-Agent: a\r\nSemaq-Intent: x\r\n\r\n");
        let block = b"NATS/1.0\r\nSemaq-Intent: given\r\n\r\n";
        let routed = routed_headers(Some(block), "a", "x");
        assert_eq!(Headers::new(&routed).get(names::INTENT), Some("given"));
    }

    #[test]
    fn a_reply_status_decides_the_outcome() {
        assert_eq!(outcome_of(None, 5), Outcome::Success { latency_us: 5, tokens_out: None });
        assert_eq!(outcome_of(Some(b"NATS/1.0 503\r\n\r\n"), 5), Outcome::Refused);
        assert_eq!(outcome_of(Some(b"NATS/1.0\r\nSemaq-Status: error\r\n\r\n"), 5), Outcome::Error);
        assert_eq!(outcome_of(Some(b"NATS/1.0\r\nsemaq-status: Retry\r\n\r\n"), 5), Outcome::Refused);
        assert_eq!(
            outcome_of(Some(b"NATS/1.0\r\nSemaq-Status: ok\r\nSemaq-Tokens-Out: 40\r\n\r\n"), 5),
            Outcome::Success { latency_us: 5, tokens_out: Some(40) }
        );
    }
}
