//! The agent network's state: live agents, the synapses of each intent, in-flight counts and
//! requests waiting. Every method runs under the one `Agents` lock and does no I/O: callers
//! decide here, then deliver outside the lock. The requests in flight themselves live in
//! [`InFlight`], which replies reach without this lock.

use std::collections::HashMap;

use foldhash::HashMap as FastMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::affinity::{self, Candidate};
use super::announce::{AnnounceError, Announcement};
use super::in_flight::{InFlight, Learned, Pending};
use super::synapse::{pick_of_two, Outcome, Synapse};
use super::waiting::Waiting;
use crate::client::Client;
use crate::limits;

/// How an agent joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `$SEMAQ.AGENT.HB` heartbeats.
    Heartbeat,
    /// A NATS service's `$SRV.INFO` reply.
    Service,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Heartbeat => "heartbeat",
            Source::Service => "service",
        }
    }
}

/// One live agent.
#[derive(Debug)]
struct Agent {
    announcement: Announcement,
    /// The announcement's inbox, shared with every routed message's target without a copy.
    inbox: Arc<str>,
    client: Arc<Client>,
    source: Source,
    in_flight: u32,
    last_seen_us: u64,
    joined_us: u64,
}

/// Counts per (intent, agent).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    routed: u64,
    ok: u64,
    errors: u64,
    timeouts: u64,
    refused: u64,
}

#[derive(Debug)]
struct Member {
    agent_id: Arc<str>,
    synapse: Synapse,
    tally: Tally,
}

/// Counts per intent.
#[derive(Debug, Default, Clone, Copy)]
struct IntentTally {
    routed: u64,
    unroutable: u64,
    no_responders: u64,
    waited: u64,
    wait_timeouts: u64,
    session_moves: u64,
}

/// A request waiting for capacity: an owned copy of the message.
#[derive(Debug, Clone)]
pub struct Parked {
    /// The subject it was published to (`intent.<name>`).
    pub subject: String,
    /// Where the requester waits.
    pub reply: String,
    /// Its header block.
    pub headers: Option<Bytes>,
    /// Its body.
    pub payload: Bytes,
    /// The requester's connection.
    pub publisher: Option<u64>,
    /// The connection whose agent declined it, which gets it again only when no other can.
    pub avoid: Option<u64>,
}

impl Parked {
    fn bytes(&self) -> usize {
        self.subject.len() + self.reply.len() + self.headers.as_ref().map_or(0, Bytes::len) + self.payload.len()
    }
}

#[derive(Debug)]
struct Intent {
    /// The table's key, kept here so one lookup gives both (requests in flight share it).
    name: Arc<str>,
    members: Vec<Member>,
    waiting: Waiting<Parked>,
    tally: IntentTally,
}

impl Intent {
    fn new(name: Arc<str>) -> Self {
        Self { name, members: Vec::new(), waiting: Waiting::default(), tally: IntentTally::default() }
    }
}

/// The agent and intent a reply answered for.
#[derive(Debug, Clone)]
pub struct Answered {
    /// The agent that answered.
    pub agent_id: Arc<str>,
    /// The intent it answered for.
    pub intent: Arc<str>,
}

impl Answered {
    /// The agent and intent of a request in flight.
    pub fn of(pending: &Pending) -> Self {
        Self { agent_id: pending.agent_id.clone(), intent: pending.intent.clone() }
    }
}

/// Where a routed message goes.
#[derive(Debug, Clone)]
pub struct Target {
    /// The chosen agent.
    pub agent_id: Arc<str>,
    /// Its connection.
    pub client: Arc<Client>,
    /// Its inbox subject.
    pub inbox: Arc<str>,
}

/// What to do with one message on `intent.<name>`.
#[derive(Debug)]
pub enum Decision {
    /// Hand it to this agent (a request is already counted in flight).
    Deliver(Target),
    /// Every agent is full: the request waits.
    Wait,
    /// No live agent serves the intent, or the wait queue is full.
    Unroutable,
}

/// What a sweep found.
#[derive(Debug, Default)]
pub struct Swept {
    /// Requests whose wait ran out: each gets its 503.
    pub wait_expired: Vec<Parked>,
    /// Intents that have both waiting requests and free capacity again.
    pub ready: Vec<Arc<str>>,
}

/// All agents and intents.
#[derive(Debug, Default)]
pub struct Table {
    agents: FastMap<Arc<str>, Agent>,
    intents: FastMap<Arc<str>, Intent>,
    /// Requests in flight, shared with the reply path, which takes no table lock.
    in_flight: Arc<InFlight>,
    /// Lessons taken from `in_flight`'s queue, kept for the buffer's capacity.
    lessons: Vec<Learned>,
    sessions: FastMap<Box<str>, (Arc<str>, u64)>,
    waiting_bytes: usize,
    /// Requests waiting for capacity, over every intent.
    waiting_count: usize,
    /// Buffers `decide` reuses, so routing a message allocates nothing for its candidates.
    scratch: Scratch,
}

/// Candidate lists of one decision, kept between decisions for their capacity.
#[derive(Debug, Default)]
struct Scratch {
    /// The intent's live members, each agent looked up once per decision.
    live: Vec<Live>,
    /// Indexes into `live` of those that may take the message.
    open: Vec<usize>,
}

/// A live member as one decision sees it.
#[derive(Debug, Clone, Copy)]
struct Live {
    /// Its index in the intent's members.
    member: usize,
    /// Its agent's requests in flight.
    in_flight: u32,
    /// Its agent's capacity.
    capacity: u32,
}

impl Live {
    fn of(member: usize, agent: &Agent) -> Self {
        Self { member, in_flight: agent.in_flight, capacity: agent.announcement.capacity }
    }
}

impl Table {
    /// The requests in flight, for the reply path.
    pub fn in_flight(&self) -> Arc<InFlight> {
        self.in_flight.clone()
    }

    /// Applies the outcomes replies left in the queue; returns the intents with requests
    /// waiting that those freed slots may now serve.
    pub fn apply_learned(&mut self) -> Vec<Arc<str>> {
        let mut lessons = std::mem::take(&mut self.lessons);
        self.in_flight.drain_into(&mut lessons);
        let mut ready = Vec::new();
        for lesson in lessons.drain(..) {
            ready.extend(self.complete(&lesson.pending, Some(lesson.outcome), lesson.at_us));
        }
        self.lessons = lessons;
        ready.sort();
        ready.dedup();
        ready
    }

    /// Adds or refreshes an agent. A new intent list replaces the old one.
    pub fn upsert(
        &mut self,
        announcement: Announcement,
        client: &Arc<Client>,
        source: Source,
        now_us: u64,
    ) -> Result<(), AnnounceError> {
        let id: Arc<str> = announcement.agent_id.as_str().into();
        if let Some(existing) = self.agents.get_mut(&id) {
            if existing.client.id != client.id && !existing.client.outbound.is_closing() {
                return Err(AnnounceError::IdTaken(announcement.agent_id));
            }
            let old_intents = std::mem::take(&mut existing.announcement.intents);
            existing.client = client.clone();
            existing.source = source;
            existing.last_seen_us = now_us;
            if *existing.inbox != announcement.inbox {
                existing.inbox = announcement.inbox.as_str().into();
            }
            existing.announcement = announcement;
            for gone in old_intents.iter().filter(|name| !existing.announcement.intents.contains(name)) {
                if let Some(intent) = self.intents.get_mut(gone.as_str()) {
                    intent.members.retain(|member| member.agent_id != id);
                }
            }
            let intents = existing.announcement.intents.clone();
            self.join(&id, &intents, now_us);
            return Ok(());
        }
        if self.agents.len() >= limits::AGENTS_MAX {
            return Err(AnnounceError::TooManyAgents(limits::AGENTS_MAX));
        }
        let intents = announcement.intents.clone();
        let agent = Agent {
            inbox: announcement.inbox.as_str().into(),
            announcement,
            client: client.clone(),
            source,
            in_flight: 0,
            last_seen_us: now_us,
            joined_us: now_us,
        };
        self.agents.insert(id.clone(), agent);
        self.join(&id, &intents, now_us);
        Ok(())
    }

    fn join(&mut self, id: &Arc<str>, intents: &[String], now_us: u64) {
        for name in intents {
            let intent = self.intents.entry(name.as_str().into()).or_insert_with_key(|name| Intent::new(name.clone()));
            if !intent.members.iter().any(|member| &member.agent_id == id) {
                intent.members.push(Member {
                    agent_id: id.clone(),
                    synapse: Synapse::new(now_us),
                    tally: Tally::default(),
                });
            }
        }
    }

    /// Removes an agent at once; true when it was there. Its requests in flight are forgotten
    /// (their replies, if any, still reach the requesters directly).
    pub fn remove(&mut self, agent_id: &str) -> bool {
        let Some(agent) = self.agents.remove(agent_id) else { return false };
        for name in &agent.announcement.intents {
            if let Some(intent) = self.intents.get_mut(name.as_str()) {
                intent.members.retain(|member| &*member.agent_id != agent_id);
            }
        }
        self.in_flight.forget_agent(agent.client.id, agent_id);
        self.forget_empty_intents();
        true
    }

    /// Whether `agent_id` is live and announced from connection `connection`.
    pub fn is_announced_by(&self, agent_id: &str, connection: u64) -> bool {
        self.agents.get(agent_id).is_some_and(|agent| agent.client.id == connection)
    }

    /// Removes every agent of a closed connection.
    pub fn connection_closed(&mut self, connection: u64) {
        let ids: Vec<Arc<str>> =
            self.agents.iter().filter(|(_, a)| a.client.id == connection).map(|(id, _)| id.clone()).collect();
        for id in ids {
            self.remove(&id);
        }
        self.in_flight.forget_connection(connection);
    }

    /// Drops intents nobody serves and nothing waits for (waiting requests stay until their wait ends).
    fn forget_empty_intents(&mut self) {
        self.intents.retain(|_, intent| !intent.members.is_empty() || !intent.waiting.is_empty());
    }

    /// Decides where one message goes: by session affinity, else by cost, away from the agents of
    /// connection `avoid` while another is live. `draw(n)` returns a random index below `n`.
    pub fn decide(
        &mut self,
        name: &str,
        (session, avoid): (Option<&str>, Option<u64>),
        request: Option<(&str, u64)>,
        now_us: u64,
        draw: impl FnMut(usize) -> usize,
    ) -> Decision {
        // Capacity is judged on every reply so far; waiting requests learn of freed slots
        // from the sweep or the next reply (rare: replies queue lessons only while none wait).
        self.apply_learned();
        let Some(intent) = self.intents.get_mut(name) else { return Decision::Unroutable };
        let agents = &self.agents;
        let scratch = &mut self.scratch;
        let live = &mut scratch.live;
        live.clear();
        let open_agents = intent.members.iter().enumerate().filter_map(|(member, m)| {
            agents.get(&m.agent_id).filter(|agent| !agent.client.outbound.is_closing()).map(|agent| (member, agent))
        });
        let mut avoided = 0;
        for (member, agent) in open_agents.clone() {
            match avoid == Some(agent.client.id) {
                true => avoided += 1,
                false => live.push(Live::of(member, agent)),
            }
        }
        if live.is_empty() && avoided > 0 {
            // Only the connection to avoid has live agents: it gets the message after all.
            live.extend(open_agents.map(|(member, agent)| Live::of(member, agent)));
        }
        if live.is_empty() {
            intent.tally.unroutable += 1;
            return Decision::Unroutable;
        }
        let chosen = match session {
            Some(session) => choose_by_session(intent, live, session, request.is_some()),
            None => None,
        }
        .or_else(|| choose_by_cost(intent, (live, &mut scratch.open), request.is_some(), now_us, draw));
        let Some(index) = chosen else { return Decision::Wait };
        let member = &mut intent.members[index];
        member.tally.routed += 1;
        intent.tally.routed += 1;
        let agent_id = member.agent_id.clone();
        let Some(agent) = self.agents.get_mut(&agent_id) else { return Decision::Unroutable };
        let target = Target { agent_id: agent_id.clone(), client: agent.client.clone(), inbox: agent.inbox.clone() };
        if let Some((reply, deadline_us)) = request {
            agent.in_flight += 1;
            let pending = Pending {
                intent: intent.name.clone(),
                agent_id: agent_id.clone(),
                client: agent.client.clone(),
                started_us: now_us,
                deadline_us,
            };
            let replaced = self.in_flight.insert(agent.client.id, reply, pending);
            // A requester reusing a reply subject still in flight: the older request can no
            // longer be told apart, so it stops counting (its slot is freed, nothing learned).
            if let Some(older) = replaced {
                self.complete(&older, None, now_us);
            }
        }
        if let Some(session) = session {
            self.remember_session(name, session, &agent_id, now_us);
        }
        Decision::Deliver(target)
    }

    fn remember_session(&mut self, intent: &str, session: &str, agent_id: &Arc<str>, now_us: u64) {
        if let Some((previous, seen)) = self.sessions.get_mut(session) {
            if previous != agent_id {
                if let Some(intent) = self.intents.get_mut(intent) {
                    intent.tally.session_moves += 1;
                }
                *previous = agent_id.clone();
            }
            *seen = now_us;
            return;
        }
        if self.sessions.len() >= limits::AGENT_SESSIONS_TRACKED_MAX {
            // Forget the older half: a forgotten session keeps its agent (hashing), only its
            // move count starts over.
            let mut ages: Vec<u64> = self.sessions.values().map(|(_, seen)| *seen).collect();
            let middle = ages.len() / 2;
            let (_, cut, _) = ages.select_nth_unstable(middle);
            let cut = *cut;
            self.sessions.retain(|_, (_, seen)| *seen > cut);
        }
        self.sessions.insert(session.into(), (agent_id.clone(), now_us));
    }

    /// Queues a request that found every agent full; false when the queue is full.
    pub fn park(&mut self, name: &str, priority: u8, deadline_us: u64, parked: Parked) -> bool {
        let Some(intent) = self.intents.get_mut(name) else { return false };
        let size = parked.bytes();
        if intent.waiting.len() >= limits::AGENT_WAITING_MESSAGES_MAX
            || self.waiting_bytes + size > limits::AGENT_WAITING_BYTES_MAX
        {
            return false;
        }
        intent.tally.waited += 1;
        intent.waiting.push(priority, deadline_us, parked);
        self.waiting_bytes += size;
        self.count_waiting(1, 0);
        true
    }

    /// The next waiting request of `name`, if an agent has room for it now.
    pub fn unpark(&mut self, name: &str) -> Option<Parked> {
        self.apply_learned();
        let intent = self.intents.get_mut(name)?;
        let agents = &self.agents;
        let room = intent
            .members
            .iter()
            .any(|m| agents.get(&m.agent_id).is_some_and(|a| a.in_flight < a.announcement.capacity));
        if !room {
            return None;
        }
        let parked = intent.waiting.pop()?;
        self.waiting_bytes -= parked.bytes();
        self.count_waiting(0, 1);
        Some(parked)
    }

    /// Requests the live agents of `name` could take now, in all.
    pub fn free_capacity(&mut self, name: &str) -> usize {
        self.apply_learned();
        let Some(intent) = self.intents.get(name) else { return 0 };
        let free = intent.members.iter().filter_map(|m| self.agents.get(&m.agent_id)).map(|agent| {
            let open = !agent.client.outbound.is_closing();
            if open {
                agent.announcement.capacity.saturating_sub(agent.in_flight) as usize
            } else {
                0
            }
        });
        free.sum::<usize>().saturating_sub(intent.waiting.len())
    }

    /// Whether any agent serves, or any request waits for, intent `name`.
    pub fn knows(&self, name: &str) -> bool {
        self.intents.contains_key(name)
    }

    /// Counts a request that reached nobody.
    pub fn count_no_responders(&mut self, name: &str) {
        if let Some(intent) = self.intents.get_mut(name) {
            intent.tally.no_responders += 1;
        }
    }

    fn count_waiting(&mut self, added: usize, removed: usize) {
        self.waiting_count = (self.waiting_count + added).saturating_sub(removed);
        self.in_flight.set_waiting(self.waiting_count);
    }

    /// Learns from a finished request and frees its agent's slot; returns the intents of that
    /// agent with requests waiting, to be offered the slot.
    pub fn complete(&mut self, pending: &Pending, outcome: Option<Outcome>, now_us: u64) -> Vec<Arc<str>> {
        let Some(agent) = self.agents.get_mut(&pending.agent_id) else { return Vec::new() };
        agent.in_flight = agent.in_flight.saturating_sub(1);
        if let (Some(outcome), Some(intent)) = (outcome, self.intents.get_mut(&*pending.intent)) {
            // Only a failure's penalty is scaled by the slowest peer.
            let reference = match outcome {
                Outcome::Success { .. } => 0.0,
                _ => intent.members.iter().map(|m| m.synapse.latency_us(now_us)).fold(0.0, f64::max),
            };
            // The pending request holds the member's own `Arc`: a pointer comparison finds it.
            let is_it = |m: &&mut Member| Arc::ptr_eq(&m.agent_id, &pending.agent_id) || m.agent_id == pending.agent_id;
            if let Some(member) = intent.members.iter_mut().find(is_it) {
                member.synapse.observe(outcome, now_us, reference);
                let tally = &mut member.tally;
                match outcome {
                    Outcome::Success { .. } => tally.ok += 1,
                    Outcome::Error => tally.errors += 1,
                    Outcome::Timeout => tally.timeouts += 1,
                    Outcome::Refused => tally.refused += 1,
                }
            }
        }
        let Some(agent) = self.agents.get(&pending.agent_id) else { return Vec::new() };
        agent
            .announcement
            .intents
            .iter()
            .filter_map(|name| self.intents.get_key_value(name.as_str()))
            .filter(|(_, intent)| !intent.waiting.is_empty())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Expires silent agents, requests past their timeout and waits past their bound.
    pub fn sweep(&mut self, now_us: u64, expiry_us: u64) -> Swept {
        let silent: Vec<Arc<str>> = self
            .agents
            .iter()
            .filter(|(_, a)| now_us.saturating_sub(a.last_seen_us) > expiry_us || a.client.outbound.is_closing())
            .map(|(id, _)| id.clone())
            .collect();
        for id in silent {
            tracing::debug!(agent = %id, "agent expired");
            self.remove(&id);
        }
        let mut swept = Swept { ready: self.apply_learned(), ..Swept::default() };
        for pending in self.in_flight.take_late(now_us) {
            swept.ready.extend(self.complete(&pending, Some(Outcome::Timeout), now_us));
        }
        for intent in self.intents.values_mut() {
            let expired = intent.waiting.expire(now_us);
            intent.tally.wait_timeouts += expired.len() as u64;
            swept.wait_expired.extend(expired);
        }
        self.waiting_bytes -= swept.wait_expired.iter().map(Parked::bytes).sum::<usize>();
        self.count_waiting(0, swept.wait_expired.len());
        self.forget_empty_intents();
        swept.ready.sort();
        swept.ready.dedup();
        swept
    }

    /// Everything `/semaq/agents` and `agent ls` show.
    pub fn snapshot(&mut self, now_us: u64) -> Value {
        self.apply_learned();
        let mut sessions_held: HashMap<&str, u64> = HashMap::new();
        for (agent_id, _) in self.sessions.values() {
            *sessions_held.entry(agent_id).or_default() += 1;
        }
        let mut agents: Vec<Value> = self
            .agents
            .iter()
            .map(|(id, agent)| {
                json!({
                    "agent_id": id.as_ref(),
                    "source": agent.source.as_str(),
                    "connection": agent.client.id,
                    "inbox": agent.announcement.inbox,
                    "intents": agent.announcement.intents,
                    "descriptions": agent.announcement.descriptions,
                    "metadata": agent.announcement.metadata,
                    "capacity": agent.announcement.capacity,
                    "in_flight": agent.in_flight,
                    "sessions": sessions_held.get(id.as_ref()).copied().unwrap_or(0),
                    "last_seen_ms_ago": now_us.saturating_sub(agent.last_seen_us) / 1000,
                    "joined_ms_ago": now_us.saturating_sub(agent.joined_us) / 1000,
                })
            })
            .collect();
        agents.sort_by(|a, b| a["agent_id"].as_str().cmp(&b["agent_id"].as_str()));
        let mut intents: Vec<Value> =
            self.intents.iter().map(|(name, intent)| self.intent_json(name, intent, now_us)).collect();
        intents.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        json!({ "agents": agents, "intents": intents })
    }

    fn intent_json(&self, name: &str, intent: &Intent, now_us: u64) -> Value {
        let members: Vec<Value> = intent
            .members
            .iter()
            .map(|member| {
                let in_flight = self.agents.get(&member.agent_id).map_or(0, |a| a.in_flight);
                let t = member.tally;
                json!({
                    "agent_id": member.agent_id.as_ref(),
                    "weight": round3(member.synapse.weight()),
                    "healthy": member.synapse.is_healthy(),
                    "latency_ms": round3(member.synapse.latency_us(now_us) / 1000.0),
                    "penalty_ms": round3(member.synapse.penalty_us(now_us) / 1000.0),
                    "cost": round3(member.synapse.cost(in_flight, now_us)),
                    "in_flight": in_flight,
                    "routed": t.routed, "ok": t.ok, "errors": t.errors, "timeouts": t.timeouts, "refused": t.refused,
                })
            })
            .collect();
        let t = intent.tally;
        json!({
            "name": name,
            "agents": members,
            "waiting": intent.waiting.len(),
            "routed": t.routed, "unroutable": t.unroutable, "no_responders": t.no_responders,
            "waited": t.waited, "wait_timeouts": t.wait_timeouts, "session_moves": t.session_moves,
        })
    }
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

fn choose_by_session(intent: &Intent, live: &[Live], session: &str, request: bool) -> Option<usize> {
    let candidates: Vec<Candidate<'_>> = live
        .iter()
        .map(|l| {
            let member = &intent.members[l.member];
            Candidate {
                agent_id: &member.agent_id,
                in_flight: l.in_flight,
                capacity: l.capacity,
                healthy: member.synapse.is_healthy(),
            }
        })
        .collect();
    affinity::choose(session, &candidates, request).map(|k| live[k].member)
}

fn choose_by_cost(
    intent: &Intent,
    (live, open): (&[Live], &mut Vec<usize>),
    request: bool,
    now_us: u64,
    draw: impl FnMut(usize) -> usize,
) -> Option<usize> {
    open.clear();
    open.extend((0..live.len()).filter(|&k| !request || live[k].in_flight < live[k].capacity));
    let cost = |k: usize| {
        let candidate = live[open[k]];
        intent.members[candidate.member].synapse.cost(candidate.in_flight, now_us)
    };
    pick_of_two(open.len(), cost, draw).map(|k| live[open[k]].member)
}
